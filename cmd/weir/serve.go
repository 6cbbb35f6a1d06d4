package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/weirq/weir"
	"github.com/weirq/weir/weirmigrate"
	"github.com/weirq/weir/weirui"
)

var serveCommand = &command{
	name:    "serve",
	summary: "serve the operations dashboard and its JSON API over HTTP",
	usage:   serveUsage,
	run:     runServe,
}

// envAuthFile names the environment variable that holds --auth-file's default.
const envAuthFile = "WEIR_AUTH_FILE"

func serveUsage(w io.Writer) {
	fmt.Fprintf(w, `Usage:

    weir serve [--database-url URL] [--schema NAME] [--addr HOST:PORT]
               [--auth-file PATH] [--trust-proxy-header NAME --trusted-proxy CIDR,...]
               [--hide-payloads [--show-errors-to-viewers]] [--base-path /PREFIX]
               [--tls-cert FILE --tls-key FILE] [--metrics-public] [--login-failures N/PERIOD]
    weir serve --hash-password < password

serve runs the operations dashboard (pages and the JSON API under /api/v1/, see
docs/dashboard.md) on --addr, with /healthz (the process answers) and /readyz
(the database answers and its schema is migrated) beside it, unauthenticated,
and /metrics for Prometheus (the queues' depth by state, the maintenance
leader, the dashboard's requests) behind the dashboard's authentication, under
--base-path, or beside /healthz without credentials with --metrics-public.
It runs no jobs. It stops on SIGINT or SIGTERM.

Authentication: --auth-file (default $`+envAuthFile+`) lists bearer tokens, by
their SHA-256, and basic users, by a password hash, each a viewer (reads) or an
operator (also retries, cancels, deletes, pauses, resumes, triggers):

    operator:token:sha256:HEX      HEX: printf '%%s' "$TOKEN" | sha256sum
    viewer:user:NAME:HASH          HASH: weir serve --hash-password
    operator:proxy-user:NAME       a user --trust-proxy-header names

The auth file must not be writable by its group or others (any local user
could add an operator): serve refuses it unless --allow-writable-auth-file.

--trust-proxy-header takes the user from a header that a reverse proxy sets,
on requests from --trusted-proxy addresses only; users not in the auth file
get --proxy-role. A request that carries the header twice is refused.

The audit log goes to stderr: a line for each change (who, what, the result;
refused ones too) and each failed login, never a password or token. After
--login-failures failed logins from one address, its requests with
credentials get 429 until it may try again.

Without any authentication serve listens on a loopback address only, and every
request is an operator's; any other address is refused.

Flags:
`)
	fs, _ := serveFlags()
	printDefaults(w, fs)
}

type serveOpts struct {
	db             dbFlags
	addr           string
	authFile       string
	proxyHeader    string
	trustedProxies string
	proxyRole      string
	hidePayloads   bool
	showErrors     bool
	basePath       string
	tlsCert        string
	tlsKey         string
	hashPassword   bool
	metricsPublic  bool
	// writableAuth accepts an auth file that its group or others may write.
	writableAuth  bool
	loginFailures string
}

func serveFlags() (*flag.FlagSet, *serveOpts) {
	o := &serveOpts{}
	fs := newFlagSet("weir serve")
	o.db.register(fs)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen on `HOST:PORT`; an address other than loopback needs authentication")
	fs.StringVar(&o.authFile, "auth-file", "", "read tokens, users and proxy users' roles from `PATH` (default $"+envAuthFile+")")
	fs.StringVar(&o.proxyHeader, "trust-proxy-header", "", "take the user from header `NAME` (such as X-Forwarded-User) on requests from --trusted-proxy")
	fs.StringVar(&o.trustedProxies, "trusted-proxy", "", "the reverse proxies' `ADDRESSES`: IPs or CIDR prefixes, comma-separated")
	fs.StringVar(&o.proxyRole, "proxy-role", "viewer", "`ROLE` of a proxy user the auth file does not list: viewer, operator or none")
	fs.BoolVar(&o.hidePayloads, "hide-payloads", false, "hide jobs' args, metadata, output, progress, errors and traces from viewers, and refuse them the search by args")
	fs.BoolVar(&o.showErrors, "show-errors-to-viewers", false, "with --hide-payloads, show viewers the errors and traces still")
	fs.StringVar(&o.basePath, "base-path", "", "serve the dashboard under `/PREFIX`, such as /weir (a proxy forwards the prefix unchanged)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with the certificate in `FILE` (PEM; with --tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the private key of --tls-cert, in `FILE` (PEM)")
	fs.BoolVar(&o.hashPassword, "hash-password", false, "read a password on standard input, print its hash for the auth file, and exit")
	fs.BoolVar(&o.metricsPublic, "metrics-public", false, "serve /metrics without credentials, beside /healthz, instead of behind the dashboard's authentication")
	fs.BoolVar(&o.writableAuth, "allow-writable-auth-file", false, "serve with an auth file that its group or others may write, with a warning")
	fs.StringVar(&o.loginFailures, "login-failures", "10/1m", "allow `N/PERIOD` failed logins from one client address: N in a row, then one each PERIOD/N")
	return fs, o
}

func runServe(ctx context.Context, e *env, args []string) error {
	fs, o := serveFlags()
	if err := parseFlags(e, fs, args, serveUsage); err != nil {
		return err
	}
	if o.hashPassword {
		return hashPassword(e)
	}
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	auth, err := o.auth(e, fs, logger)
	if err != nil {
		return err
	}
	if err := weirui.CheckBasePath(o.basePath); err != nil {
		return usagef("serve: --base-path %v", err)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return usagef("serve: --tls-cert and --tls-key go together")
	}
	if o.showErrors && !o.hidePayloads {
		return usagef("serve: --show-errors-to-viewers needs --hide-payloads: without it viewers see the errors anyway")
	}
	loginFailures, err := weir.ParseRateLimit(o.loginFailures)
	if err != nil || loginFailures.Limit == 0 {
		return usagef("serve: --login-failures %q is not N/PERIOD with N from 1 to 1000000, such as 10/1m", o.loginFailures)
	}
	anonymous := auth == nil
	if anonymous {
		if err := checkLoopback(ctx, o.addr); err != nil {
			return err
		}
	} else if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usagef("serve: --addr %q is not HOST:PORT: %v", o.addr, err)
	}
	if err := o.db.resolve(e, fs); err != nil {
		return err
	}

	client, closeDB, err := openClient(ctx, &o.db)
	if err != nil {
		return err
	}
	defer closeDB()
	metrics, countRequests := newMetrics(client, logger)
	uiOpts := &weirui.Options{
		Auth: auth, AllowAnonymous: anonymous, HidePayloadsFromViewers: o.hidePayloads,
		ShowErrorsToViewers: o.showErrors, FailedLogins: loginFailures, Logger: logger,
	}
	if !o.metricsPublic {
		uiOpts.Metrics = metrics
	}
	ui, err := weirui.NewHandler(client, uiOpts)
	if err != nil {
		return uiErr(err)
	}
	ui = countRequests(ui)

	if anonymous {
		ui = loopbackHostOnly(ui)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := weirmigrate.New(client.Driver()).Check(ctx); err != nil {
			logger.Warn("weir serve: not ready", "error", o.db.clientErr(fs, err).Error())
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: the database does not answer or its schema is not migrated (see the server's log)")
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if o.metricsPublic {
		if anonymous {
			metrics = loopbackHostOnly(metrics)
		}
		mux.Handle("GET /metrics", metrics)
	}
	if o.basePath == "" {
		mux.Handle("/", ui)
	} else {
		// The handler finds the prefix from each request, for its links.
		mux.Handle(o.basePath+"/", http.StripPrefix(o.basePath, ui))
		mux.Handle("GET "+o.basePath, http.RedirectHandler(o.basePath+"/", http.StatusMovedPermanently))
	}

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("serve: %v", err)
	}
	// What was bound is checked again: a name may resolve otherwise now.
	if tcp, ok := ln.Addr().(*net.TCPAddr); anonymous && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return notLoopback(o.addr)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	how := "authentication from the auth file"
	switch {
	case anonymous:
		how = "no authentication: whoever reaches this loopback address is an operator"
	case auth.ProxyHeader != "":
		how = "authentication by " + auth.ProxyHeader + " from trusted proxies, and the auth file"
	}
	if scheme == "http" && !anonymous {
		how += "; plain HTTP: put a TLS proxy in front or pass --tls-cert and --tls-key"
	}
	fmt.Fprintf(e.stdout, "weir serve: listening on %s://%s%s/ (%s)\n", scheme, ln.Addr(), o.basePath, how)

	served := make(chan error, 1)
	go func() {
		if o.tlsCert != "" {
			served <- srv.ServeTLS(ln, o.tlsCert, o.tlsKey)
		} else {
			served <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %v", err)
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil {
		srv.Close()
	}
	<-served
	return nil
}

// auth reads the auth file and the proxy flags; nil when none is given.
func (o *serveOpts) auth(e *env, fs *flag.FlagSet, logger *slog.Logger) (*weirui.Auth, error) {
	if !isSet(fs, "auth-file") {
		o.authFile = e.getenv(envAuthFile)
	}
	var auth *weirui.Auth
	if o.authFile != "" {
		var err error
		if auth, err = o.readAuthFile(logger); err != nil {
			return nil, err
		}
		if len(auth.Tokens) == 0 && len(auth.Users) == 0 && o.proxyHeader == "" {
			return nil, usagef("serve: --auth-file %s holds no token and no user", o.authFile)
		}
	}
	role, err := weirui.ParseRole(o.proxyRole)
	if err != nil {
		return nil, usagef("serve: --proxy-role: %v", err)
	}
	switch {
	case o.proxyHeader == "" && o.trustedProxies != "":
		return nil, usagef("serve: --trusted-proxy needs --trust-proxy-header")
	case o.proxyHeader != "" && o.trustedProxies == "":
		return nil, usagef("serve: --trust-proxy-header needs --trusted-proxy, the addresses of the proxies that set it")
	case o.proxyHeader == "" && isSet(fs, "proxy-role"):
		return nil, usagef("serve: --proxy-role needs --trust-proxy-header")
	case o.proxyHeader == "":
		return auth, nil
	}
	if auth == nil {
		auth = &weirui.Auth{}
	}
	auth.ProxyHeader, auth.ProxyDefaultRole = o.proxyHeader, role
	for item := range strings.SplitSeq(o.trustedProxies, ",") {
		item = strings.TrimSpace(item)
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return nil, usagef("serve: --trusted-proxy %q is not an IP address or CIDR prefix", item)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		auth.TrustedProxies = append(auth.TrustedProxies, p.Masked())
	}
	if err := auth.Validate(); err != nil {
		return nil, uiErr(err)
	}
	return auth, nil
}

// readAuthFile reads --auth-file. A file that its group or others may write
// is refused, or with --allow-writable-auth-file read with a warning: anyone
// who may write it can make themselves an operator.
func (o *serveOpts) readAuthFile(logger *slog.Logger) (*weirui.Auth, error) {
	f, err := os.Open(o.authFile)
	if err != nil {
		return nil, usagef("serve: --auth-file: %v", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, usagef("serve: --auth-file: %v", err)
	}
	if mode := info.Mode().Perm(); mode&0o022 != 0 && runtime.GOOS != "windows" {
		what := fmt.Sprintf("--auth-file %s is writable by its group or others (mode %04o): any of them could add an operator", o.authFile, mode)
		if !o.writableAuth {
			return nil, usagef("serve: %s; run chmod go-w on it, or pass --allow-writable-auth-file", what)
		}
		logger.Warn("weir serve: " + what + "; served anyway (--allow-writable-auth-file)")
	}
	auth, err := weirui.ParseAuthFile(f)
	if err != nil {
		return nil, usagef("serve: --auth-file %s: %v", o.authFile, err)
	}
	return auth, nil
}

// uiErr is the error weir serve prints for err of weirui: options the
// dashboard refuses are a mistake in the command line or the auth file.
func uiErr(err error) error {
	if e, ok := errors.AsType[*weirui.InvalidError](err); ok {
		return usagef("serve: %s", e.Message)
	}
	return err
}

// checkLoopback refuses an address that is not a loopback one.
func checkLoopback(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("serve: --addr %q is not HOST:PORT: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.IsLoopback() {
			return nil
		}
		return notLoopback(addr)
	}
	if host == "" {
		return notLoopback(addr)
	}
	lookup, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(lookup, "ip", host)
	if err != nil {
		return fmt.Errorf("serve: --addr %s: %v", addr, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return notLoopback(addr)
		}
	}
	return nil
}

func notLoopback(addr string) error {
	return usagef("serve: --addr %s is not a loopback address, and no authentication is configured: "+
		"anyone who reaches it could change jobs; set --auth-file (or --trust-proxy-header and --trusted-proxy), "+
		"or listen on 127.0.0.1", addr)
}

// hashPassword reads a password on standard input and prints its hash.
func hashPassword(e *env) error {
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("serve: --hash-password: %v", err)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return usagef("serve: --hash-password: no password on standard input")
	}
	h, err := weirui.HashPassword(password)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, h)
	return err
}

// loopbackHostOnly serves requests whose Host is a loopback address or
// localhost. Without authentication, a page of another site whose name
// resolves to 127.0.0.1 (DNS rebinding) would otherwise be same-origin with
// the dashboard: it could read jobs and post changes.
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); (err == nil && ip.IsLoopback()) || host == "localhost" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.Error(w, "weir serve: without authentication, only requests to 127.0.0.1, [::1] or localhost are served; "+
			"this Host is refused as a defence against DNS rebinding", http.StatusMisdirectedRequest)
	})
}
