package weirui

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirtype"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	return http.FileServerFS(sub)
}

var funcs = template.FuncMap{
	"since":  since,
	"ago":    ago,
	"time":   fmtTime,
	"ptime":  fmtPTime,
	"pretty": pretty,
	"states": weirtype.JobStates,
	"count":  func(q *weir.QueueStats, s weirtype.JobState) int64 { return q.Counts[s] },
	// keyLimit is the queue's key limit as its key and its limits, between
	// which a narrow cell may break the line.
	"keyLimit": func(q *weir.QueueStats) [2]string {
		k := weir.QueueKeyLimit(q)
		return [2]string{k.Key, strings.TrimPrefix(k.String(), k.Key+":")}
	},
	"rateLimit": func(q *weir.QueueStats) string {
		return weir.RateLimit{Limit: q.RateLimit, Period: q.RatePeriod}.String()
	},
	"estimated": func(q *weir.QueueStats, s weirtype.JobState) bool { return q.Estimated[s] },
	"anyEstimated": func(queues []*weir.QueueStats) bool {
		for _, q := range queues {
			if len(q.Estimated) > 0 {
				return true
			}
		}
		return false
	},
}

// pages holds one template set per page, each with the layout.
var pages = func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, name := range []string{"overview", "jobs", "job", "queues", "periodic", "clients", "error", "done", "bulk"} {
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).
			ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return out
}()

func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String()
}

// ago says how long ago t was, for a time the database wrote: "just now"
// when the dashboard's clock is behind the database's.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	if d <= 0 {
		return "just now"
	}
	return d.String() + " ago"
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func fmtPTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

// pretty indents a JSON value for a <pre>; the template escapes it.
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// page is what every page's template gets.
type page struct {
	Base     string
	User     string
	Role     string
	Operator bool
	CSRF     string
	Title    string
	Nav      string
	Refresh  int
	Status   int
	// Live is the URL the page's live part is polled from (the page's own,
	// answered with only that part when the request carries HX-Request).
	Live string
	Now  time.Time
	Body any
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, body any) {
	ri := info(r)
	p := &page{Base: ri.base, Title: title, Nav: name, Status: status, Body: body, Now: time.Now()}
	live := url.Values{}
	for k, v := range r.URL.Query() {
		if k != "refresh" {
			live[k] = v
		}
	}
	p.Live = ri.base + r.URL.EscapedPath()
	if len(live) > 0 {
		p.Live += "?" + live.Encode()
	}
	if ri.id != nil {
		p.User, p.Role, p.Operator = ri.id.name, ri.id.role.String(), ri.id.role == RoleOperator
		p.CSRF = h.csrfToken(ri.id)
	}
	if v := r.URL.Query().Get("refresh"); v != "" && status == http.StatusOK {
		if n, err := strconv.Atoi(v); err == nil && n >= 2 && n <= 3600 {
			p.Refresh = n
		}
	}
	tmpl := pages[name]
	w.Header().Set("Vary", "HX-Request")
	if r.Header.Get("HX-Request") == "true" && status == http.StatusOK && tmpl.Lookup("live") != nil {
		// A poll of the live part: that part alone.
		tmpl = tmpl.Lookup("live")
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, p); err != nil {
		h.opts.Logger.Error("weirui: render", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(shown(buf.Bytes()))
}

// errorBody is what the error page says, and where it leads back to.
type errorBody struct {
	Message, Back, BackTo string
}

func (h *handler) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", http.StatusText(status), &errorBody{Message: msg, Back: info(r).base + "/", BackTo: "the overview"})
}

func (h *handler) pageFail(w http.ResponseWriter, r *http.Request, err error) {
	h.pageFailBack(w, r, err, info(r).base+"/", "the overview")
}

// pageFailBack answers err with the error page, leading back to back.
func (h *handler) pageFailBack(w http.ResponseWriter, r *http.Request, err error, back, backTo string) {
	status, _, param, msg := h.classify(r, err)
	if param != "" {
		msg = "bad " + param + ": " + msg
	}
	h.render(w, r, status, "error", http.StatusText(status), &errorBody{Message: msg, Back: back, BackTo: backTo})
}

type overviewBody struct {
	Queues     []*weir.QueueStats
	Leader     *leaderJSON
	Throughput *throughput
}

func (h *handler) pageOverview(w http.ResponseWriter, r *http.Request) {
	// The three reads go at once, each on its own connection: the page takes
	// the longest of them, not their sum.
	ctx := r.Context()
	body := &overviewBody{}
	var wg sync.WaitGroup
	var queuesErr, leaderErr, tpErr error
	wg.Go(func() { body.Queues, queuesErr = h.client.QueueListEstimated(ctx) })
	wg.Go(func() { body.Leader, leaderErr = h.leader(ctx) })
	wg.Go(func() { body.Throughput, tpErr = h.throughput(ctx) })
	wg.Wait()
	if err := cmp.Or(queuesErr, leaderErr, tpErr); err != nil {
		h.pageFail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", body)
}

type jobsBody struct {
	Q                     *listQuery
	Jobs                  []*jobView
	Next                  string
	First                 string
	RefreshOn, RefreshOff string
	Hidden                bool
	// Filtered is set when a filter other than order and page size is set:
	// a bulk action needs one.
	Filtered     bool
	FilterFields []field
	// SearchedTo is set when the page's window ended it before it was full:
	// the id the search reached, and Next searches on from there.
	SearchedTo int64
	Descending bool
	// ErrorsHidden hides the last error of each job (Options).
	ErrorsHidden bool
}

// pageWindow bounds what one page of the job list reads, in ids from where
// the page starts: a filter that matches few jobs, or none, and that no index
// serves would otherwise read the whole table at every page and every poll
// (on a million jobs, 0.3 to 0.8 s). A page that the window ends before it
// is full offers to search on.
const pageWindow = 100_000

type field struct{ Name, Value string }

// jobView is a job with its args and its last error cut short for a list.
type jobView struct {
	*weir.JobRow
	ArgsPreview string
	LastError   string
}

func preview(raw json.RawMessage) string { return cut(string(raw)) }

// cut returns s up to 120 bytes, at a character's start, marked when cut.
func cut(s string) string {
	if len(s) > 120 {
		n := 120
		for n > 0 && !utf8Start(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	return s
}

// lastError is the first line of the job's latest error, cut short.
func lastError(j *weir.JobRow) string {
	if len(j.Errors) == 0 {
		return ""
	}
	msg := strings.TrimSpace(j.Errors[len(j.Errors)-1].Error)
	line, _, more := strings.Cut(msg, "\n")
	if more {
		line += " …"
	}
	return cut(line)
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func (h *handler) pageJobs(w http.ResponseWriter, r *http.Request) {
	lq, err := h.jobList(r)
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	if lq.params.Window == 0 {
		lq.params.Window = pageWindow
	}
	res, err := h.list(r.Context(), lq)
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	body := &jobsBody{Q: lq, Hidden: h.hidePayloads(r), ErrorsHidden: h.hideErrors(r), SearchedTo: res.SearchedTo, Descending: lq.params.Descending}
	for _, j := range res.Jobs {
		v := &jobView{JobRow: j}
		if !body.Hidden {
			v.ArgsPreview = preview(j.Args)
		}
		if !body.ErrorsHidden {
			v.LastError = lastError(j)
		}
		body.Jobs = append(body.Jobs, v)
	}
	base := info(r).base
	q := url.Values{}
	for k, v := range map[string]string{"state": lq.State, "queue": lq.Queue, "kind": lq.Kind, "tag": lq.Tag, "q": lq.Search, "id": lq.ID,
		"created_after": lq.CreatedAfter, "created_before": lq.CreatedBefore} {
		if v != "" {
			q.Set(k, v)
		}
	}
	body.Filtered = len(q) > 0
	for _, k := range []string{"state", "queue", "kind", "tag", "q", "id", "created_after", "created_before"} {
		if v := q.Get(k); v != "" {
			body.FilterFields = append(body.FilterFields, field{k, v})
		}
	}
	if lq.Order != "desc" {
		q.Set("order", lq.Order)
	}
	if lq.Limit != defaultLimit {
		q.Set("limit", strconv.Itoa(lq.Limit))
	}
	if lq.params.Cursor != 0 {
		body.First = base + "/jobs?" + q.Encode()
	}
	// Refreshing reloads the page it is on.
	here := url.Values{}
	for k, v := range q {
		here[k] = v
	}
	if lq.params.Cursor != 0 {
		here.Set("after", strconv.FormatInt(lq.params.Cursor, 10))
	}
	body.RefreshOff = base + "/jobs?" + here.Encode()
	here.Set("refresh", "10")
	body.RefreshOn = base + "/jobs?" + here.Encode()
	if res.Next != 0 {
		q.Set("after", strconv.FormatInt(res.Next, 10))
		body.Next = base + "/jobs?" + q.Encode()
	}
	h.render(w, r, http.StatusOK, "jobs", "Jobs", body)
}

type jobBody struct {
	Job          *weir.JobRow
	Hidden       bool
	ErrorsHidden bool
	Done         string
}

func (h *handler) pageJob(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	job, err := h.client.JobGet(r.Context(), id)
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	done := map[string]string{"retry": "Job retried.", "cancel": "Job cancelled, or its cancel requested."}[r.URL.Query().Get("done")]
	h.render(w, r, http.StatusOK, "job", fmt.Sprintf("Job %d", job.ID), &jobBody{Job: job, Hidden: h.hidePayloads(r), ErrorsHidden: h.hideErrors(r), Done: done})
}

type doneBody struct {
	Message string
	Back    string
	BackTo  string
}

func (h *handler) pageJobAction(w http.ResponseWriter, r *http.Request) {
	job, action, err := h.jobAction(r)
	base := info(r).base
	if id, idErr := parseID(r.PathValue("id")); err != nil && idErr == nil && !errors.Is(err, weir.ErrNotFound) {
		// The job's page shows what it is now, and the actions that apply.
		h.pageFailBack(w, r, err, fmt.Sprintf("%s/jobs/%d", base, id), fmt.Sprintf("job %d", id))
		return
	}
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	if action == "delete" {
		h.render(w, r, http.StatusOK, "done", "Job deleted",
			&doneBody{Message: fmt.Sprintf("Job %d deleted.", job.ID), Back: base + "/jobs", BackTo: "the jobs"})
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/jobs/%d?done=%s", base, job.ID, action), http.StatusSeeOther)
}

func (h *handler) pageQueues(w http.ResponseWriter, r *http.Request) {
	queues, err := h.client.QueueListEstimated(r.Context())
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "queues", "Queues", queues)
}

func (h *handler) pageQueueAction(w http.ResponseWriter, r *http.Request) {
	if _, err := h.queueAction(r); err != nil {
		h.pageFail(w, r, err)
		return
	}
	http.Redirect(w, r, info(r).base+"/queues", http.StatusSeeOther)
}

func (h *handler) pagePeriodic(w http.ResponseWriter, r *http.Request) {
	rows, err := h.client.PeriodicList(r.Context())
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "periodic", "Schedules", rows)
}

func (h *handler) pagePeriodicAction(w http.ResponseWriter, r *http.Request) {
	if _, _, err := h.periodicAction(r); err != nil {
		h.pageFail(w, r, err)
		return
	}
	http.Redirect(w, r, info(r).base+"/periodic", http.StatusSeeOther)
}

type clientsBody struct {
	Clients []*weir.ClientRow
	Leader  *leaderJSON
	// LeaderListed is set when the leader is among Clients.
	LeaderListed bool
}

func (h *handler) pageClients(w http.ResponseWriter, r *http.Request) {
	rows, err := h.client.ClientList(r.Context())
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	leader, err := h.leader(r.Context())
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	body := &clientsBody{Clients: rows, Leader: leader}
	for _, c := range rows {
		body.LeaderListed = body.LeaderListed || c.ID == leader.ID
	}
	h.render(w, r, http.StatusOK, "clients", "Clients", body)
}
