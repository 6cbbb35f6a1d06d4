package weirui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtype"
)

// Page sizes of job lists.
const (
	defaultLimit = 50
	maxLimit     = 1000
)

func (h *handler) routes() {
	m := h.mux
	// JSON API.
	m.HandleFunc("GET /api/v1/session", h.apiSession)
	m.HandleFunc("GET /api/v1/jobs", h.apiJobs)
	m.HandleFunc("GET /api/v1/jobs/{id}", h.apiJob)
	m.HandleFunc("POST /api/v1/jobs/{id}/{action}", h.apiJobAction)
	m.HandleFunc("POST /api/v1/jobs/bulk/{action}", h.apiBulk)
	m.HandleFunc("GET /api/v1/throughput", h.apiThroughput)
	m.HandleFunc("GET /api/v1/queues", h.apiQueues)
	m.HandleFunc("POST /api/v1/queues/{name}/{action}", h.apiQueueAction)
	m.HandleFunc("GET /api/v1/periodic", h.apiPeriodic)
	m.HandleFunc("POST /api/v1/periodic/{name}/{action}", h.apiPeriodicAction)
	m.HandleFunc("GET /api/v1/leader", h.apiLeader)
	m.HandleFunc("GET /api/v1/clients", h.apiClients)
	for _, p := range []string{"/api/v1/jobs/{id}/{action}", "/api/v1/queues/{name}/{action}", "/api/v1/periodic/{name}/{action}"} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "POST")
			writeJSONError(w, http.StatusMethodNotAllowed, "method_not_allowed", "", r.Method+" changes nothing: use POST")
		})
	}
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, http.StatusNotFound, "not_found", "", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	// Pages.
	m.HandleFunc("GET /{$}", h.pageOverview)
	m.HandleFunc("GET /jobs", h.pageJobs)
	m.HandleFunc("GET /jobs/{id}", h.pageJob)
	m.HandleFunc("POST /jobs/{id}/{action}", h.pageJobAction)
	m.HandleFunc("GET /jobs/bulk", h.pageBulkConfirm)
	m.HandleFunc("POST /jobs/bulk/{action}", h.pageBulk)
	m.HandleFunc("GET /queues", h.pageQueues)
	m.HandleFunc("POST /queues/{name}/{action}", h.pageQueueAction)
	m.HandleFunc("GET /periodic", h.pagePeriodic)
	m.HandleFunc("POST /periodic/{name}/{action}", h.pagePeriodicAction)
	m.HandleFunc("GET /clients", h.pageClients)
	m.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	if h.opts.Metrics != nil {
		m.Handle("GET /metrics", h.opts.Metrics)
	}
}

// apiError is the body of every error the API returns.
type apiError struct {
	Error struct {
		// Code is a stable word: bad_parameter, not_found, conflict,
		// unauthenticated, forbidden, csrf, cross_origin, method_not_allowed,
		// too_large, not_migrated, internal.
		Code string `json:"code"`
		// Parameter names the bad query parameter or path segment.
		Parameter string `json:"parameter,omitempty"`
		Message   string `json:"message"`
	} `json:"error"`
}

func writeJSONError(w http.ResponseWriter, status int, code, param, msg string) {
	var e apiError
	e.Error.Code, e.Error.Parameter, e.Error.Message = code, param, msg
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(shown(buf.Bytes()))
}

// badParam is a bad input, named.
type badParam struct{ param, msg string }

func (b *badParam) Error() string { return b.msg }

func badParamf(param, format string, args ...any) error {
	return &badParam{param: param, msg: fmt.Sprintf(format, args...)}
}

// classify maps an error of the client to an HTTP status, a code and the
// message shown. Database errors are logged and shown as a generic message.
func (h *handler) classify(r *http.Request, err error) (int, string, string, string) {
	status, code, param, msg := h.classifyErr(r, err)
	noteFailure(r, code, msg)
	return status, code, param, msg
}

func (h *handler) classifyErr(r *http.Request, err error) (int, string, string, string) {
	if b, ok := errors.AsType[*badParam](err); ok {
		return http.StatusBadRequest, "bad_parameter", b.param, b.msg
	}
	if errors.Is(err, errSearchHidden) {
		return http.StatusForbidden, "forbidden", "q", err.Error()
	}
	if inv, ok := errors.AsType[*weir.InvalidError](err); ok {
		return http.StatusBadRequest, "bad_parameter", paramOfField(inv.Field), inv.Message
	}
	switch {
	case errors.Is(err, weir.ErrNotFound):
		return http.StatusNotFound, "not_found", "", "not found"
	case errors.Is(err, weir.ErrJobRunning):
		return http.StatusConflict, "conflict", "", "the job is running: cancel it first, or wait for it to end"
	case errors.Is(err, weir.ErrJobFinal):
		return http.StatusConflict, "conflict", "", "the job is final (completed, cancelled or discarded)"
	case errors.Is(err, weir.ErrPeriodicDeclared):
		return http.StatusConflict, "conflict", "", "the leader declares this schedule: remove it from the clients' config first, or pause it"
	case errors.Is(err, weir.ErrNotMigrated):
		return http.StatusServiceUnavailable, "not_migrated", "", "weir's schema is not migrated: run `weir migrate up`"
	case errors.Is(err, context.Canceled):
		return 499, "canceled", "", "request canceled"
	}
	h.opts.Logger.Error("weirui: database error", "method", r.Method, "path", r.URL.Path, "error", err)
	return http.StatusInternalServerError, "internal", "", "the database call failed; the server's log says why"
}

func paramOfField(field string) string {
	switch field {
	case "JobListParams.States":
		return "state"
	case "JobListParams.Queues":
		return "queue"
	case "JobListParams.Kinds":
		return "kind"
	case "JobListParams.Tags":
		return "tag"
	case "JobListParams.Limit":
		return "limit"
	case "JobListParams.Cursor":
		return "after"
	case "JobListParams.CreatedAfter":
		return "created_after"
	case "JobListParams.CreatedBefore":
		return "created_before"
	case "JobListParams.Search":
		return "q"
	}
	return field
}

func (h *handler) apiFail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, param, msg := h.classify(r, err)
	writeJSONError(w, status, code, param, msg)
}

// listQuery is a parsed job list request.
type listQuery struct {
	params weir.JobListParams
	id     int64
	// Echoed into the filter form.
	State, Queue, Kind, Tag, ID, Order string
	CreatedAfter, CreatedBefore        string
	Search                             string
	Limit                              int
}

// errSearchHidden refuses a viewer the search while payloads are hidden: q
// matches the args, so that guessing one character at a time would read them.
var errSearchHidden = errors.New("searching the kind or args (q) is for operators: payloads are hidden from viewers")

// jobList reads the job list's parameters of r, and refuses a search that
// r's user may not make.
func (h *handler) jobList(r *http.Request) (*listQuery, error) {
	lq, err := parseList(r.URL.Query())
	if err != nil {
		return nil, err
	}
	if lq.Search != "" && h.hidePayloads(r) {
		return nil, errSearchHidden
	}
	return lq, nil
}

// listValues reads comma-separated or repeated values of a parameter.
func listValues(q url.Values, name string) []string {
	var out []string
	for _, v := range q[name] {
		for item := range strings.SplitSeq(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

var knownListParams = map[string]bool{
	"state": true, "queue": true, "kind": true, "tag": true, "id": true,
	"after": true, "limit": true, "order": true, "refresh": true, "window": true,
	"created_after": true, "created_before": true, "q": true,
}

// parseList reads a job list's query parameters.
func parseList(q url.Values) (*listQuery, error) {
	for k := range q {
		if !knownListParams[k] {
			return nil, badParamf(k, "unknown parameter %q (known: state, queue, kind, tag, q, id, created_after, created_before, after, limit, order, window)", k)
		}
	}
	lq := &listQuery{
		State: strings.Join(listValues(q, "state"), ","), Queue: strings.Join(listValues(q, "queue"), ","),
		Kind: strings.Join(listValues(q, "kind"), ","), Tag: strings.Join(listValues(q, "tag"), ","),
		ID: q.Get("id"), Order: q.Get("order"), Limit: defaultLimit,
		CreatedAfter: q.Get("created_after"), CreatedBefore: q.Get("created_before"), Search: q.Get("q"),
	}
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"created_after", &lq.params.CreatedAfter}, {"created_before", &lq.params.CreatedBefore}} {
		if v := q.Get(b.name); v != "" {
			at, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, badParamf(b.name, "%s %q is not an RFC 3339 time such as 2026-12-04T10:00:00Z", b.name, v)
			}
			*b.to = at
		}
	}
	p := &lq.params
	for _, s := range listValues(q, "state") {
		st := weirtype.JobState(s)
		if !st.Valid() {
			return nil, badParamf("state", "state %q is not a job state (one of %s)", s, statesList())
		}
		p.States = append(p.States, st)
	}
	p.Queues, p.Kinds, p.Tags = listValues(q, "queue"), listValues(q, "kind"), listValues(q, "tag")
	p.Search = lq.Search
	if v := q.Get("id"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			return nil, badParamf("id", "id %q is not a positive job id", v)
		}
		lq.id = id
	}
	if v := q.Get("after"); v != "" {
		after, err := strconv.ParseInt(v, 10, 64)
		if err != nil || after <= 0 {
			return nil, badParamf("after", "after %q is not a positive job id (the next_cursor of the previous page)", v)
		}
		p.Cursor = after
	}
	if v := q.Get("window"); v != "" {
		window, err := strconv.ParseInt(v, 10, 64)
		if err != nil || window <= 0 {
			return nil, badParamf("window", "window %q is not a positive number of job ids", v)
		}
		p.Window = window
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return nil, badParamf("limit", "limit %q is not a whole number from 1 to %d", v, maxLimit)
		}
		lq.Limit = n
	}
	p.Limit = lq.Limit
	switch lq.Order {
	case "", "desc":
		p.Descending = true
		lq.Order = "desc"
	case "asc":
	default:
		return nil, badParamf("order", "order %q is not asc or desc", lq.Order)
	}
	return lq, nil
}

func statesList() string {
	var s []string
	for _, st := range weirtype.JobStates() {
		s = append(s, string(st))
	}
	return strings.Join(s, ", ")
}

// list runs a job list query. An id filter reads that one job and keeps it
// when it matches the other filters.
func (h *handler) list(ctx context.Context, lq *listQuery) (*weir.JobListResult, error) {
	if lq.id == 0 {
		return h.client.JobList(ctx, &lq.params)
	}
	// The other filters are checked by JobList's rules first.
	check := lq.params
	check.Limit = 1
	if _, err := h.client.JobList(ctx, &check); err != nil && errors.Is(err, weir.ErrInvalid) {
		return nil, err
	}
	job, err := h.client.JobGet(ctx, lq.id)
	if errors.Is(err, weir.ErrNotFound) {
		return &weir.JobListResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	if !matches(job, &lq.params) {
		return &weir.JobListResult{}, nil
	}
	return &weir.JobListResult{Jobs: []*weir.JobRow{job}}, nil
}

func matches(j *weir.JobRow, p *weir.JobListParams) bool {
	in := func(v string, set []string) bool {
		if len(set) == 0 {
			return true
		}
		for _, s := range set {
			if s == v {
				return true
			}
		}
		return false
	}
	states := make([]string, len(p.States))
	for i, s := range p.States {
		states[i] = string(s)
	}
	if !in(string(j.State), states) || !in(j.Queue, p.Queues) || !in(j.Kind, p.Kinds) {
		return false
	}
	for _, t := range p.Tags {
		if !in(t, j.Tags) || len(j.Tags) == 0 {
			return false
		}
	}
	if p.Search != "" {
		// As the database matches: the kind, or the args' JSON text as it
		// keeps it (which is what JobGet returned), in any case.
		s := strings.ToLower(p.Search)
		return strings.Contains(strings.ToLower(j.Kind), s) || strings.Contains(strings.ToLower(string(j.Args)), s)
	}
	return true
}

// jobJSON is a job as the API shows it.
type jobJSON struct {
	ID                int64             `json:"id"`
	State             weirtype.JobState `json:"state"`
	Queue             string            `json:"queue"`
	Kind              string            `json:"kind"`
	Priority          int               `json:"priority"`
	Attempt           int               `json:"attempt"`
	MaxAttempts       int               `json:"max_attempts"`
	Tags              []string          `json:"tags"`
	CreatedAt         time.Time         `json:"created_at"`
	ScheduledAt       time.Time         `json:"scheduled_at"`
	AttemptedAt       *time.Time        `json:"attempted_at"`
	FinalizedAt       *time.Time        `json:"finalized_at"`
	AttemptedBy       string            `json:"attempted_by"`
	LeaseToken        int64             `json:"lease_token"`
	LeaseExpiresAt    *time.Time        `json:"lease_expires_at"`
	CancelRequestedAt *time.Time        `json:"cancel_requested_at"`
	ReleaseCount      int               `json:"release_count"`
	Errors            []attemptJSON     `json:"errors"`
	// PayloadsHidden is set when the viewer may not see args, metadata,
	// output and progress (Options.HidePayloadsFromViewers).
	PayloadsHidden bool `json:"payloads_hidden,omitempty"`
	// ErrorsHidden is set when the viewer may not see the errors' texts and
	// traces: each attempt has its number and time only.
	ErrorsHidden bool            `json:"errors_hidden,omitempty"`
	Args         json.RawMessage `json:"args,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	Output       json.RawMessage `json:"output,omitempty"`
	Progress     json.RawMessage `json:"progress,omitempty"`
}

// attemptJSON is a failed attempt as the API shows it: Error and Trace are
// left out when the errors are hidden.
type attemptJSON struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   *string   `json:"error,omitempty"`
	Trace   string    `json:"trace,omitempty"`
}

func (h *handler) hidePayloads(r *http.Request) bool {
	return h.opts.HidePayloadsFromViewers && info(r).id.role != RoleOperator
}

// hideErrors reports whether r's user may not see errors' texts and traces.
func (h *handler) hideErrors(r *http.Request) bool {
	return h.hidePayloads(r) && !h.opts.ShowErrorsToViewers
}

func attemptsOf(errs []weirtype.AttemptError, hidden bool) []attemptJSON {
	out := make([]attemptJSON, len(errs))
	for i, e := range errs {
		out[i] = attemptJSON{Attempt: e.Attempt, At: e.At}
		if !hidden {
			out[i].Error, out[i].Trace = &e.Error, e.Trace
		}
	}
	return out
}

func (h *handler) jobOf(r *http.Request, j *weir.JobRow) *jobJSON {
	out := &jobJSON{
		ID: j.ID, State: j.State, Queue: j.Queue, Kind: j.Kind, Priority: j.Priority, Attempt: j.Attempt,
		MaxAttempts: j.MaxAttempts, Tags: j.Tags, CreatedAt: j.CreatedAt, ScheduledAt: j.ScheduledAt,
		AttemptedAt: j.AttemptedAt, FinalizedAt: j.FinalizedAt, AttemptedBy: j.AttemptedBy,
		LeaseToken: j.LeaseToken, LeaseExpiresAt: j.LeaseExpiresAt, CancelRequestedAt: j.CancelRequestedAt,
		ReleaseCount: j.ReleaseCount, ErrorsHidden: h.hideErrors(r),
	}
	out.Errors = attemptsOf(j.Errors, out.ErrorsHidden)
	if out.Tags == nil {
		out.Tags = []string{}
	}
	if h.hidePayloads(r) {
		out.PayloadsHidden = true
	} else {
		out.Args, out.Metadata, out.Output, out.Progress = j.Args, j.Metadata, j.Output, j.Progress
	}
	return out
}

func (h *handler) apiSession(w http.ResponseWriter, r *http.Request) {
	id := info(r).id
	writeJSON(w, http.StatusOK, map[string]string{
		"user": id.name, "role": id.role.String(), "csrf_token": h.csrfToken(id),
	})
}

func (h *handler) apiJobs(w http.ResponseWriter, r *http.Request) {
	lq, err := h.jobList(r)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	res, err := h.list(r.Context(), lq)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	out := struct {
		Jobs []*jobJSON `json:"jobs"`
		// NextCursor is the after of the next page; 0 on the last page.
		NextCursor int64 `json:"next_cursor"`
		// SearchedTo is set when the window ended the page before it was
		// full: the id it searched to.
		SearchedTo int64 `json:"searched_to,omitempty"`
	}{Jobs: []*jobJSON{}, NextCursor: res.Next, SearchedTo: res.SearchedTo}
	for _, j := range res.Jobs {
		out.Jobs = append(out.Jobs, h.jobOf(r, j))
	}
	writeJSON(w, http.StatusOK, out)
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, badParamf("id", "job id %q is not a positive whole number", s)
	}
	return id, nil
}

func (h *handler) apiJob(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	job, err := h.client.JobGet(r.Context(), id)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h.jobOf(r, job))
}

// jobAction runs a job action named in the path.
func (h *handler) jobAction(r *http.Request) (*weir.JobRow, string, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return nil, "", err
	}
	action := r.PathValue("action")
	op, err := h.jobOp(action)
	if err != nil {
		return nil, "", err
	}
	note(r, "action", "job."+action, "job", id)
	job, err := op(r.Context(), id)
	return job, action, err
}

func (h *handler) apiJobAction(w http.ResponseWriter, r *http.Request) {
	job, _, err := h.jobAction(r)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h.jobOf(r, job))
}

// queueJSON is a queue as the API shows it.
type queueJSON struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
	// GlobalLimit is the queue's global limit; null when it has none.
	GlobalLimit *int `json:"global_limit"`
	// RateLimit is the queue's rate limit; null when it has none.
	RateLimit *rateJSON `json:"rate_limit"`
	// KeyLimit is the queue's limit per key; null when it has none.
	KeyLimit *keyLimitJSON               `json:"key_limit"`
	Counts   map[weirtype.JobState]int64 `json:"counts"`
	// Estimated lists the states whose count is an estimate; empty when
	// every count is exact.
	Estimated []weirtype.JobState `json:"estimated"`
	// OldestAvailableAt is the scheduled time of the job waiting longest.
	OldestAvailableAt *time.Time `json:"oldest_available_at"`
}

// rateJSON is a rate limit: limit jobs started per period (a Go duration).
type rateJSON struct {
	Limit  int    `json:"limit"`
	Period string `json:"period"`
}

// keyLimitJSON is a queue's limits per value of key: at most limit jobs
// running (0: none) and a rate (null: none).
type keyLimitJSON struct {
	Key   string    `json:"key"`
	Limit int       `json:"limit"`
	Rate  *rateJSON `json:"rate"`
}

func queueOf(q *weir.QueueStats) queueJSON {
	out := queueJSON{Name: q.Name, Paused: q.Paused, Counts: map[weirtype.JobState]int64{}, Estimated: []weirtype.JobState{}}
	if q.GlobalLimit > 0 {
		limit := q.GlobalLimit
		out.GlobalLimit = &limit
	}
	if q.RateLimit > 0 {
		out.RateLimit = &rateJSON{Limit: q.RateLimit, Period: q.RatePeriod.String()}
	}
	if q.Key != "" {
		out.KeyLimit = &keyLimitJSON{Key: q.Key, Limit: q.KeyLimit}
		if q.KeyRate > 0 {
			out.KeyLimit.Rate = &rateJSON{Limit: q.KeyRate, Period: q.KeyRatePeriod.String()}
		}
	}
	for _, s := range weirtype.JobStates() {
		out.Counts[s] = q.Counts[s]
		if q.Estimated[s] {
			out.Estimated = append(out.Estimated, s)
		}
	}
	if !q.OldestAvailableAt.IsZero() {
		t := q.OldestAvailableAt
		out.OldestAvailableAt = &t
	}
	return out
}

// parseQueues reads the queue list's parameters: exact=true counts every
// state exactly (QueueList, which reads the whole table), for scripts.
func parseQueues(q url.Values) (exact bool, err error) {
	for k := range q {
		if k != "exact" {
			return false, badParamf(k, "unknown parameter %q (known: exact)", k)
		}
	}
	if v := q.Get("exact"); v != "" {
		exact, err = strconv.ParseBool(v)
		if err != nil {
			return false, badParamf("exact", "exact %q is not true or false", v)
		}
	}
	return exact, nil
}

func (h *handler) apiQueues(w http.ResponseWriter, r *http.Request) {
	exact, err := parseQueues(r.URL.Query())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	list := h.client.QueueListEstimated
	if exact {
		list = h.client.QueueList
	}
	queues, err := list(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	out := []queueJSON{}
	for _, q := range queues {
		out = append(out, queueOf(q))
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

// queueAction pauses, resumes or limits the queue the path names, and
// returns the API's answer. The limit action takes global_limit, from the
// query or the form: 1 to 1,000,000, or none to remove the limit. The rate
// action takes rate_limit: N/PERIOD (50/1s), or none.
func (h *handler) queueAction(r *http.Request) (map[string]any, error) {
	name, action := r.PathValue("name"), r.PathValue("action")
	answer := map[string]any{"name": name}
	note(r, "action", "queue."+action, "queue", name)
	var err error
	switch action {
	case "pause", "resume":
		if action == "pause" {
			err = h.client.QueuePause(r.Context(), name)
		} else {
			err = h.client.QueueResume(r.Context(), name)
		}
		answer["paused"] = action == "pause"
	case "limit":
		var limit int
		if limit, err = parseGlobalLimit(r.FormValue("global_limit")); err == nil {
			note(r, "global_limit", limit)
			err = h.client.QueueSetGlobalLimit(r.Context(), name, limit)
		}
		var out *int
		if limit > 0 {
			out = &limit
		}
		answer["global_limit"] = out
	case "rate":
		var rate weir.RateLimit
		if rate, err = parseRateLimit(r.FormValue("rate_limit")); err == nil {
			note(r, "rate_limit", rate.String())
			err = h.client.QueueSetRateLimit(r.Context(), name, rate)
		}
		var out *rateJSON
		if rate.Limit > 0 {
			out = &rateJSON{Limit: rate.Limit, Period: rate.Period.String()}
		}
		answer["rate_limit"] = out
	default:
		err = badParamf("action", "queue action %q is not pause, resume, limit or rate", action)
	}
	return answer, err
}

// parseRateLimit reads the rate action's rate_limit.
func parseRateLimit(v string) (weir.RateLimit, error) {
	r, err := weir.ParseRateLimit(strings.TrimSpace(v))
	if err != nil {
		return r, badParamf("rate_limit", "rate_limit %v", err)
	}
	return r, nil
}

// parseGlobalLimit reads the limit action's global_limit.
func parseGlobalLimit(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, badParamf("global_limit", "global_limit is required: a number from 1 to 1000000, or none")
	}
	n, err := weir.ParseGlobalLimit(v)
	if err != nil {
		return 0, badParamf("global_limit", "global_limit %v", err)
	}
	return n, nil
}

func (h *handler) apiQueueAction(w http.ResponseWriter, r *http.Request) {
	answer, err := h.queueAction(r)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

func (h *handler) apiPeriodic(w http.ResponseWriter, r *http.Request) {
	rows, err := h.client.PeriodicList(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	if rows == nil {
		rows = []*weir.PeriodicRow{} // [], not null
	}
	writeJSON(w, http.StatusOK, map[string]any{"periodic": rows})
}

func (h *handler) periodicAction(r *http.Request) (*weir.PeriodicRow, string, error) {
	name, action := r.PathValue("name"), r.PathValue("action")
	note(r, "action", "periodic."+action, "schedule", name)
	var op func(context.Context, string) (*weir.PeriodicRow, error)
	switch action {
	case "pause":
		op = h.client.PeriodicPause
	case "resume":
		op = h.client.PeriodicResume
	case "trigger":
		op = h.client.PeriodicTrigger
	default:
		return nil, action, badParamf("action", "periodic action %q is not pause, resume or trigger", action)
	}
	row, err := op(r.Context(), name)
	return row, action, err
}

func (h *handler) apiPeriodicAction(w http.ResponseWriter, r *http.Request) {
	row, _, err := h.periodicAction(r)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, row)
}

// leaderJSON is the maintenance leader's term; its times are null when
// nobody leads.
type leaderJSON struct {
	// ID is the leading client's id; empty when nobody leads.
	ID        string     `json:"id"`
	ElectedAt *time.Time `json:"elected_at"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func (h *handler) leader(ctx context.Context) (*leaderJSON, error) {
	l, err := h.client.Leader(ctx)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return &leaderJSON{}, nil
	}
	return &leaderJSON{ID: l.ID, ElectedAt: &l.ElectedAt, ExpiresAt: &l.ExpiresAt}, nil
}

func (h *handler) apiLeader(w http.ResponseWriter, r *http.Request) {
	l, err := h.leader(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *handler) apiClients(w http.ResponseWriter, r *http.Request) {
	rows, err := h.client.ClientList(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	if rows == nil {
		rows = []*weir.ClientRow{} // [], not null
	}
	writeJSON(w, http.StatusOK, map[string]any{"clients": rows})
}
