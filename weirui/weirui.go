// Package weirui is weir's operations dashboard: HTML pages and a JSON API
// (under /api/v1/) over a weir.Client's operator calls, to list and inspect
// jobs, retry, cancel or delete them one by one or by filter, see the last
// hour's throughput, pause and resume queues, steer periodic schedules, and
// see the running clients (the client registry) and the maintenance leader.
// NewHandler returns an http.Handler that may be mounted under any path prefix
// (with http.StripPrefix); `weir serve` runs it alone.
//
// The pages work without JavaScript and carry a strict Content-Security-Policy;
// with it, vendored htmx (embedded, served from /static/) updates the overview
// and the job list in place.
// Every request is authenticated (bearer tokens, HTTP basic, or a trusted
// reverse proxy's user header) unless Options.AllowAnonymous says otherwise;
// viewers read, operators change. Every change is a POST that passes a
// same-origin check and carries a CSRF token tied to the credentials. See
// docs/dashboard.md.
package weirui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/weirq/weir"
)

// Options configure the dashboard.
type Options struct {
	// Auth says who may use the dashboard. NewHandler refuses a nil Auth (or
	// one with no credential) unless AllowAnonymous is set.
	Auth *Auth
	// AllowAnonymous serves requests that carry no credentials as an
	// operator's. Only for a listener that nobody but trusted users can reach,
	// such as a loopback address on a single-user machine.
	AllowAnonymous bool
	// HidePayloadsFromViewers hides jobs' args, metadata, output, progress,
	// and their errors' texts and traces (which often quote the args) from
	// viewers, in the pages and in the API, and refuses viewers the search
	// (q), which matches the args.
	HidePayloadsFromViewers bool
	// ShowErrorsToViewers, with HidePayloadsFromViewers, shows viewers the
	// errors' texts and traces still: for errors known to carry no payload.
	ShowErrorsToViewers bool
	// BasePath is the path prefix under which the handler is reachable, such
	// as "/weir", used in links and redirects. Empty: found from each
	// request, as what http.StripPrefix removed.
	BasePath string
	// CSRFKey signs the CSRF tokens, at least 32 bytes. Empty: a random key,
	// so that tokens change when the process restarts; several processes
	// behind one load balancer need the same key.
	CSRFKey []byte
	// Logger receives the audit log, a line for each request that would
	// change something (who, what, the result; refused ones too) and for
	// each failed login, and the errors the database returned (the pages and
	// the API show a generic message for those). No line holds a password, a
	// token or a job's payload. Default: slog.Default().
	Logger *slog.Logger
	// FailedLogins limits the failed logins from one client address (an
	// IPv4 address, or an IPv6 /64): Limit in a row, then one more each
	// Period/Limit; a request with credentials beyond that is refused with
	// 429 and Retry-After, unchecked. Behind a reverse proxy every client
	// has the proxy's address. The zero value: 10 a minute (10/1m).
	FailedLogins weir.RateLimit
	// Metrics, when set, is served at /metrics (GET) to any authenticated
	// user, a viewer too, behind the same authentication as the pages: such
	// as a Prometheus handler. It must show no job's payloads.
	Metrics http.Handler
}

// maxBody bounds a request's body: a mutation carries a CSRF token at most.
const maxBody = 16 << 10

var basePathRE = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)*$`)

// CheckBasePath says what is wrong with p as a base path (Options.BasePath,
// `weir serve --base-path`), if anything: it is empty, or a path such as
// "/weir" or "/ops/weir" whose segments are letters, digits and ._~-, none
// of them "." or "..", with no trailing slash.
func CheckBasePath(p string) error {
	ok := basePathRE.MatchString(p)
	for seg := range strings.SplitSeq(p, "/") {
		ok = ok && seg != "." && seg != ".."
	}
	if !ok {
		return fmt.Errorf(`%q is not a path such as /weir: letters, digits and ._~- between single slashes, no "." or ".." segment, no trailing slash`, p)
	}
	return nil
}

// InvalidError is the error for options the dashboard cannot serve with
// (NewHandler, Auth.Validate, HashPassword). A command can show Message under
// its own name; Field says which option was wrong, spelled as in the API
// ("Options.BasePath", "Auth.Users[2]", "client", "password").
type InvalidError struct {
	Field string
	// Message says what was wrong, naming the option.
	Message string
}

func (e *InvalidError) Error() string { return "weirui: " + e.Message }

// invalidf returns an *InvalidError about field with the formatted message.
func invalidf(field, format string, args ...any) error {
	return &InvalidError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// NewHandler returns the dashboard on client's database. The client needs no
// workers and need not be started. It returns an *InvalidError when opts
// cannot serve.
func NewHandler(client *weir.Client, opts *Options) (http.Handler, error) {
	if client == nil {
		return nil, invalidf("client", "the client is nil")
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if err := o.Auth.Validate(); err != nil {
		return nil, err
	}
	if !o.Auth.configured() && !o.AllowAnonymous {
		return nil, invalidf("Options.Auth", "no authentication configured: set Options.Auth, or Options.AllowAnonymous to serve every request as an operator's")
	}
	if o.ShowErrorsToViewers && !o.HidePayloadsFromViewers {
		return nil, invalidf("Options.ShowErrorsToViewers", "Options.ShowErrorsToViewers needs Options.HidePayloadsFromViewers: without it viewers see the errors anyway")
	}
	if o.AllowAnonymous && o.Auth.configured() {
		return nil, invalidf("Options.AllowAnonymous", "Options.AllowAnonymous with Options.Auth would make every request without credentials an operator's: set one of them")
	}
	if err := CheckBasePath(o.BasePath); err != nil {
		return nil, invalidf("Options.BasePath", "Options.BasePath %v", err)
	}
	if o.FailedLogins == (weir.RateLimit{}) {
		o.FailedLogins = defaultFailedLogins
	} else if o.FailedLogins.Limit < 1 || o.FailedLogins.Period < time.Duration(o.FailedLogins.Limit) {
		return nil, invalidf("Options.FailedLogins", "Options.FailedLogins %d/%v is not a positive number of logins per positive period", o.FailedLogins.Limit, o.FailedLogins.Period)
	}
	if o.CSRFKey == nil {
		o.CSRFKey = make([]byte, 32)
		rand.Read(o.CSRFKey)
	} else if len(o.CSRFKey) < 32 {
		return nil, invalidf("Options.CSRFKey", "Options.CSRFKey is shorter than 32 bytes")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &handler{
		client: client, opts: o, auth: newAuthenticator(o.Auth, o.AllowAnonymous, o.FailedLogins),
		origin: http.NewCrossOriginProtection(), buckets: newFinishedBuckets(),
	}
	h.origin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusForbidden, "cross_origin", "", "cross-origin request refused")
	}))
	h.mux = http.NewServeMux()
	h.routes()
	return h, nil
}

type handler struct {
	client *weir.Client
	opts   Options
	auth   *authenticator
	origin *http.CrossOriginProtection
	mux    *http.ServeMux
	// buckets keeps the throughput's finished buckets (throughput.go).
	buckets *finishedBuckets
}

// reqInfo is the request's identity and base path, and, for a request that
// would change something, what goes in its audit line.
type reqInfo struct {
	id     *identity
	base   string
	change *change
}

// ctxKey keys the request's reqInfo in its context.
type ctxKey struct{}

func info(r *http.Request) *reqInfo {
	ri, _ := r.Context().Value(ctxKey{}).(*reqInfo)
	return ri
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "same-origin")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
	hdr.Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)

	ri := &reqInfo{base: h.basePath(r)}
	r = r.WithContext(ctxWith(r, ri))
	id := h.authenticate(w, r)
	if id == nil {
		return
	}
	ri.id = id
	if !isSafe(r.Method) {
		// A change, or a refused one: the audit log gets its line.
		ri.change = &change{}
		sw := &statusWriter{ResponseWriter: w}
		defer func() { h.logChange(r, sw.status) }()
		w = sw
	}
	if id.role == RoleNone {
		h.fail(w, r, http.StatusForbidden, "forbidden", "", "user "+id.name+" has no role here")
		return
	}
	if !isSafe(r.Method) && !h.changeAllowed(w, r, id) {
		return
	}
	h.mux.ServeHTTP(w, r)
}

// authenticate says who made r, or answers it with why not and returns nil.
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) *identity {
	id, err := h.auth.authenticate(r)
	if err == nil {
		return id
	}
	if rep, ok := errors.AsType[*repeatedHeaderError](err); ok {
		h.opts.Logger.Warn("weirui: request refused", "client", clientAddr(r), "method", r.Method, "path", r.URL.Path, "error", rep.Error())
		h.fail(w, r, http.StatusBadRequest, "bad_request", "", rep.Error())
		return nil
	}
	if th, ok := errors.AsType[*throttledError](err); ok {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter(th.wait)))
		h.fail(w, r, http.StatusTooManyRequests, "too_many_requests", "", th.Error())
		return nil
	}
	if lerr, ok := errors.AsType[*loginError](err); ok {
		h.logLoginFailure(r, lerr)
	}
	if h.opts.Auth != nil && len(h.opts.Auth.Users) > 0 {
		w.Header().Set("WWW-Authenticate", `Basic realm="weir", charset="UTF-8"`)
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="weir"`)
	}
	h.fail(w, r, http.StatusUnauthorized, "unauthenticated", "", err.Error())
	return nil
}

// changeAllowed checks a request that would change something: an operator's,
// from the same origin, with a body that parses and the CSRF token of its
// credentials (unless a bearer token's). It answers a refused one.
func (h *handler) changeAllowed(w http.ResponseWriter, r *http.Request, id *identity) bool {
	if id.role != RoleOperator {
		h.fail(w, r, http.StatusForbidden, "forbidden", "", "only an operator may change jobs, queues and schedules")
		return false
	}
	if err := h.origin.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "cross_origin", "", "cross-origin request refused")
		return false
	}
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			h.fail(w, r, http.StatusRequestEntityTooLarge, "too_large", "", "request body larger than 16 KiB")
			return false
		}
		h.fail(w, r, http.StatusBadRequest, "bad_request", "", "request body does not parse as a form")
		return false
	}
	if !id.bearer && !h.csrfOK(r, id) {
		h.fail(w, r, http.StatusForbidden, "csrf", "csrf", "missing or wrong CSRF token (reload the page)")
		return false
	}
	return true
}

func isSafe(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// basePath is the prefix of the request's path that the handler does not
// see: Options.BasePath, or what http.StripPrefix removed.
func (h *handler) basePath(r *http.Request) string {
	if h.opts.BasePath != "" {
		return h.opts.BasePath
	}
	full := r.RequestURI
	if i := strings.IndexAny(full, "?#"); i >= 0 {
		full = full[:i]
	}
	base, ok := strings.CutSuffix(full, r.URL.EscapedPath())
	if !ok || CheckBasePath(base) != nil {
		return ""
	}
	return base
}

// csrfToken is the CSRF token of an identity: an HMAC of its credentials'
// key, so that it holds for the credentials and nothing else.
func (h *handler) csrfToken(id *identity) string {
	mac := hmac.New(sha256.New, h.opts.CSRFKey)
	mac.Write([]byte("weirui csrf\x00" + id.key))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (h *handler) csrfOK(r *http.Request, id *identity) bool {
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return got != "" && hmac.Equal([]byte(got), []byte(h.csrfToken(id)))
}

// fail answers an error: JSON under /api/, a page elsewhere.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, code, param, msg string) {
	noteFailure(r, code, msg)
	if isAPI(r) {
		writeJSONError(w, status, code, param, msg)
		return
	}
	h.errorPage(w, r, status, msg)
}

func isAPI(r *http.Request) bool {
	return r.URL.Path == "/api" || strings.HasPrefix(r.URL.Path, "/api/")
}

func ctxWith(r *http.Request, ri *reqInfo) context.Context {
	return context.WithValue(r.Context(), ctxKey{}, ri)
}
