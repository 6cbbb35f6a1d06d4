package weirui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/weirq/weir"
)

// bulkMax is the most jobs one bulk request acts on.
const bulkMax = 1000

// bulkResult is what a bulk action did.
type bulkResult struct {
	Action string `json:"action"`
	// Acted is how many jobs the action changed.
	Acted int `json:"acted"`
	// Skipped is how many matching jobs it could not change: running (retry,
	// delete), final (cancel), or gone since they were listed.
	Skipped int `json:"skipped"`
	// More is set when more jobs matched than this request took.
	More bool `json:"more"`
	// NextCursor, passed as after, goes on past the jobs this request saw.
	NextCursor int64 `json:"next_cursor"`
}

var bulkVerbs = map[string]string{"retry": "retried", "cancel": "cancelled", "delete": "deleted"}

// bulkQuery reads a bulk action's filters: the job list's parameters, from
// the query string or the form, without the CSRF token. At least one filter
// is needed; the page size (limit) defaults to and is at most bulkMax.
func bulkQuery(form url.Values) (*listQuery, error) {
	q := url.Values{}
	for k, v := range form {
		if k != "csrf" && k != "action" {
			q[k] = v
		}
	}
	lq, err := parseList(q)
	if err != nil {
		return nil, err
	}
	filtered := lq.id != 0 || !lq.params.CreatedAfter.IsZero() || !lq.params.CreatedBefore.IsZero()
	p := &lq.params
	if len(p.States)+len(p.Queues)+len(p.Kinds)+len(p.Tags) > 0 || p.Search != "" {
		filtered = true
	}
	if !filtered {
		return nil, badParamf("state", "a bulk action needs a filter (state, queue, kind, tag, q, id, created_after or created_before)")
	}
	if q.Get("limit") == "" {
		lq.Limit, p.Limit = bulkMax, bulkMax
	}
	return lq, nil
}

func (h *handler) jobOp(action string) (func(context.Context, int64) (*weir.JobRow, error), error) {
	switch action {
	case "retry":
		return h.client.JobRetry, nil
	case "cancel":
		return h.client.JobCancel, nil
	case "delete":
		return h.client.JobDelete, nil
	}
	return nil, badParamf("action", "job action %q is not retry, cancel or delete", action)
}

// bulk acts on one page of the jobs matching the request's filters: one
// JobList, then the action on each job by id, each in its own transaction.
// A database error stops it; the jobs changed before it stay changed.
func (h *handler) bulk(r *http.Request, action string) (*bulkResult, error) {
	op, err := h.jobOp(action)
	if err != nil {
		return nil, err
	}
	note(r, "action", "jobs.bulk."+action)
	lq, err := bulkQuery(r.Form)
	if err != nil {
		return nil, err
	}
	note(r, "filters", bulkFilters(r.Form))
	res, err := h.list(r.Context(), lq)
	if err != nil {
		return nil, err
	}
	out := &bulkResult{Action: action, More: res.Next != 0, NextCursor: res.Next}
	var acted []int64
	defer func() { note(r, "jobs", acted, "acted", out.Acted, "skipped", out.Skipped, "more", out.More) }()
	for _, j := range res.Jobs {
		_, err := op(r.Context(), j.ID)
		switch {
		case err == nil:
			out.Acted++
			acted = append(acted, j.ID)
		case errors.Is(err, weir.ErrJobRunning), errors.Is(err, weir.ErrJobFinal), errors.Is(err, weir.ErrNotFound):
			out.Skipped++
		default:
			return nil, fmt.Errorf("%s job %d after %d: %w", action, j.ID, out.Acted, err)
		}
	}
	return out, nil
}

// bulkFilters is a bulk action's form without its CSRF token, for the
// audit log.
func bulkFilters(form url.Values) string {
	q := url.Values{}
	for k, v := range form {
		if k != "csrf" {
			q[k] = v
		}
	}
	return q.Encode()
}

func (h *handler) apiBulk(w http.ResponseWriter, r *http.Request) {
	res, err := h.bulk(r, r.PathValue("action"))
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

type bulkBody struct {
	Action, Verb string
	Fields       []field
	Matching     int
	More         bool
	Limit        int
	Back         string
	Result       *bulkResult
}

func bulkFields(form url.Values) []field {
	var out []field
	for _, k := range []string{"state", "queue", "kind", "tag", "id", "created_after", "created_before", "order", "limit", "after"} {
		for _, v := range form[k] {
			out = append(out, field{k, v})
		}
	}
	return out
}

func backToList(base string, fields []field) string {
	q := url.Values{}
	for _, f := range fields {
		q.Add(f.Name, f.Value)
	}
	return base + "/jobs?" + q.Encode()
}

// pageBulkConfirm shows what a bulk action would act on, and the form that
// does it: the confirmation step.
func (h *handler) pageBulkConfirm(w http.ResponseWriter, r *http.Request) {
	if info(r).id.role != RoleOperator {
		h.errorPage(w, r, http.StatusForbidden, "only an operator may change jobs, queues and schedules")
		return
	}
	q := r.URL.Query()
	action := q.Get("action")
	if _, err := h.jobOp(action); err != nil {
		h.pageFail(w, r, err)
		return
	}
	lq, err := bulkQuery(q)
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	res, err := h.list(r.Context(), lq)
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	fields := bulkFields(q)
	h.render(w, r, http.StatusOK, "bulk", "Confirm: "+action+" matching jobs", &bulkBody{
		Action: action, Verb: bulkVerbs[action], Fields: fields, Matching: len(res.Jobs), More: res.Next != 0,
		Limit: lq.Limit, Back: backToList(info(r).base, fields),
	})
}

func (h *handler) pageBulk(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	res, err := h.bulk(r, action)
	if err != nil {
		h.pageFail(w, r, err)
		return
	}
	// The next batch goes on past the jobs this one saw, which also passes
	// the jobs the action left matching (a running job's cancel).
	form := url.Values{}
	for k, v := range r.Form {
		if k != "after" {
			form[k] = v
		}
	}
	back := backToList(info(r).base, bulkFields(form))
	if res.More {
		form.Set("after", strconv.FormatInt(res.NextCursor, 10))
	}
	h.render(w, r, http.StatusOK, "bulk", "Jobs "+bulkVerbs[action], &bulkBody{
		Action: action, Verb: bulkVerbs[action], Fields: bulkFields(form), Result: res, Back: back,
	})
}

func (h *handler) apiThroughput(w http.ResponseWriter, r *http.Request) {
	tp, err := h.throughput(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"bucket_seconds": int(bucketWidth.Seconds()), "buckets": tp.Buckets})
}
