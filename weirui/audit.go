package weirui

import "net/http"

// The audit log: one line through Options.Logger for each request that would
// change something (a POST), whoever sent it and whatever became of it, and
// one for each failed login. Lines name the user, the client address, the
// action and what it acted on, and the result; never a password, a token, a
// CSRF token or a job's payload.

// change is what a request that would change something did, for its line.
type change struct {
	// attrs are what the handler acted on: the action, the job, queue or
	// schedule, the values set, what a bulk action did.
	attrs []any
	// code and msg are the error the request was answered with, if any.
	code, msg string
}

// note adds key-value pairs to the line of r's change, if r would make one.
func note(r *http.Request, attrs ...any) {
	if ri := info(r); ri != nil && ri.change != nil {
		ri.change.attrs = append(ri.change.attrs, attrs...)
	}
}

// noteFailure records the error r was answered with.
func noteFailure(r *http.Request, code, msg string) {
	if ri := info(r); ri != nil && ri.change != nil {
		ri.change.code, ri.change.msg = code, msg
	}
}

// logChange writes the line of r's change, answered with status.
func (h *handler) logChange(r *http.Request, status int) {
	ri := info(r)
	c := ri.change
	attrs := []any{"user", ri.id.name, "role", ri.id.role.String(), "client", clientAddr(r),
		"method", r.Method, "path", r.URL.Path}
	attrs = append(attrs, c.attrs...)
	attrs = append(attrs, "status", status)
	if c.code == "" && status < 400 {
		h.opts.Logger.Info("weirui: change", append(attrs, "result", "ok")...)
		return
	}
	h.opts.Logger.Warn("weirui: change refused or failed", append(attrs, "result", c.code, "error", c.msg)...)
}

// logLoginFailure writes the line of a failed login.
func (h *handler) logLoginFailure(r *http.Request, e *loginError) {
	attrs := []any{"client", clientAddr(r), "method", r.Method, "path", r.URL.Path, "scheme", e.scheme}
	if e.user != "" {
		attrs = append(attrs, "user", e.user)
	}
	attrs = append(attrs, "reason", e.reason)
	h.opts.Logger.Warn("weirui: login failed", attrs...)
	if e.throttled {
		h.opts.Logger.Warn("weirui: failed logins throttled", "client", clientAddr(r), "key", clientKey(r),
			"limit", h.opts.FailedLogins.String())
	}
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
