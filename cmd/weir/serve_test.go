package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirdriver/weirpgx"
	"github.com/weirq/weir/weirui"
)

func TestServeRefusesPublicAddressWithoutAuth(t *testing.T) {
	t.Parallel()
	// The address is checked before the database is opened: none is needed.
	env := map[string]string{envDatabaseURL: "postgres://nobody@127.0.0.1:1/none"}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "10.1.2.3:80", "192.168.0.1:0"} {
		r := runWeir(t, env, "serve", "--addr", addr)
		wantFailure(t, r, exitUsage, "--addr "+addr+" is not a loopback address", "--auth-file")
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		if err := checkLoopback(t.Context(), addr); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	r := runWeir(t, env, "serve", "--addr", "nonsense")
	wantFailure(t, r, exitUsage, `--addr "nonsense" is not HOST:PORT`)
}

func TestServeBadFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	sum := sha256.Sum256([]byte("tok"))
	if err := os.WriteFile(good, []byte("operator:token:sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("# tokens\nviewer:token:s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envDatabaseURL: "postgres://nobody@127.0.0.1:1/none"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--auth-file", filepath.Join(dir, "missing")}, []string{"--auth-file", "no such file"}},
		{[]string{"--auth-file", bad}, []string{"--auth-file " + bad, "line 2", "a token line"}},
		{[]string{"--auth-file", empty}, []string{"holds no token and no user"}},
		{[]string{"--trusted-proxy", "10.0.0.1"}, []string{"--trusted-proxy needs --trust-proxy-header"}},
		{[]string{"--trust-proxy-header", "X-Forwarded-User"}, []string{"--trust-proxy-header needs --trusted-proxy"}},
		{[]string{"--trust-proxy-header", "X-Forwarded-User", "--trusted-proxy", "10.0.0.300"}, []string{`--trusted-proxy "10.0.0.300"`}},
		{[]string{"--trust-proxy-header", "X User", "--trusted-proxy", "10.0.0.1", "--addr", "127.0.0.1:0"}, []string{`weir: serve: Auth.ProxyHeader "X User" is not a header name`}},
		{[]string{"--trust-proxy-header", "X-U", "--trusted-proxy", "10.0.0.1", "--proxy-role", "admin"}, []string{"--proxy-role", `"admin"`}},
		{[]string{"--proxy-role", "operator"}, []string{"--proxy-role needs --trust-proxy-header"}},
		{[]string{"--auth-file", good, "--base-path", "weir"}, []string{"--base-path"}},
		{[]string{"--auth-file", good, "--base-path", "/weir/"}, []string{"--base-path"}},
		{[]string{"--auth-file", good, "--base-path", "//evil.example"}, []string{`--base-path "//evil.example" is not a path such as /weir`}},
		{[]string{"--auth-file", good, "--base-path", "/weir/.."}, []string{`--base-path "/weir/.." is not a path`}},
		{[]string{"--auth-file", good, "--base-path", "/a/./b"}, []string{`--base-path "/a/./b" is not a path`}},
		{[]string{"--auth-file", good, "--base-path", "/a//b"}, []string{`--base-path "/a//b" is not a path`}},
		{[]string{"--auth-file", good, "--base-path", "/"}, []string{`--base-path "/" is not a path`}},
		{[]string{"--auth-file", good, "--tls-cert", "c.pem"}, []string{"--tls-cert and --tls-key"}},
		{[]string{"--auth-file", good, "--show-errors-to-viewers"}, []string{"--show-errors-to-viewers needs --hide-payloads"}},
		{[]string{"--auth-file", good, "--login-failures", "none"}, []string{`--login-failures "none"`, "N/PERIOD"}},
		{[]string{"--auth-file", good, "--login-failures", "0/1m"}, []string{`--login-failures "0/1m"`}},
		{[]string{"--auth-file", good, "--login-failures", "10"}, []string{`--login-failures "10"`}},
		{[]string{"--addr", "127.0.0.1:0", "--hide-payloads", "extra"}, []string{"unexpected argument"}},
	} {
		r := runWeir(t, env, append([]string{"serve"}, tc.args...)...)
		wantFailure(t, r, exitUsage, tc.want...)
		if strings.Contains(r.stderr, "s3cret-token") {
			t.Errorf("%v: the error shows the token: %s", tc.args, r.stderr)
		}
	}
	// $WEIR_AUTH_FILE is read when --auth-file is not given.
	r := runWeir(t, map[string]string{envDatabaseURL: env[envDatabaseURL], envAuthFile: bad}, "serve")
	wantFailure(t, r, exitUsage, "--auth-file "+bad)
}

// TestServeAuthFileMode: an auth file that its group or others may write
// (where any local user could add an operator) is refused before the
// database is opened, unless --allow-writable-auth-file, which serves with a
// warning on stderr.
func TestServeAuthFileMode(t *testing.T) {
	t.Parallel()
	path := viewerAuthFile(t, "secret-token")
	env := map[string]string{envDatabaseURL: "postgres://nobody@127.0.0.1:1/none"}
	for _, mode := range []os.FileMode{0o666, 0o620, 0o602, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		r := runWeir(t, env, "serve", "--auth-file", path)
		wantFailure(t, r, exitUsage, "--auth-file "+path+" is writable by its group or others", fmt.Sprintf("mode %04o", mode), "chmod go-w", "--allow-writable-auth-file")
		r = runWeir(t, map[string]string{envDatabaseURL: env[envDatabaseURL], envAuthFile: path}, "serve")
		wantFailure(t, r, exitUsage, "--auth-file "+path+" is writable by its group or others")
	}

	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	env = map[string]string{envDatabaseURL: dbtest.URL()}
	base, log := servingLog(t, env, "--schema", schema, "--addr", "127.0.0.1:0", "--auth-file", path, "--allow-writable-auth-file")
	if code, _ := get(t, base+"/api/v1/session", "Authorization", "Bearer secret-token"); code != 200 {
		t.Errorf("with --allow-writable-auth-file: %d", code)
	}
	if got := log.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "is writable by its group or others") || !strings.Contains(got, path) {
		t.Errorf("no warning on stderr: %q", got)
	}
	// Its owner's alone (0644, 0600) is served without a word.
	for _, mode := range []os.FileMode{0o644, 0o600, 0o400} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		base, log := servingLog(t, env, "--schema", schema, "--addr", "127.0.0.1:0", "--auth-file", path)
		if code, _ := get(t, base+"/api/v1/session", "Authorization", "Bearer secret-token"); code != 200 {
			t.Errorf("mode %04o: %d", mode, code)
		}
		if got := log.String(); strings.Contains(got, "writable") {
			t.Errorf("mode %04o: %q", mode, got)
		}
	}
}

// TestServeAuditLog: weir serve writes the audit log to stderr: a change
// with its user, client and result, a failed login, never the token.
func TestServeAuditLog(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	sum := sha256.Sum256([]byte("operator-secret"))
	path := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(path, []byte("operator:token:sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envDatabaseURL: dbtest.URL()}
	base, log := servingLog(t, env, "--schema", schema, "--addr", "127.0.0.1:0", "--auth-file", path, "--login-failures", "2/1h")
	if code, body := post(t, base+"/api/v1/queues/mail/pause", "Authorization", "Bearer operator-secret"); code != 200 {
		t.Fatalf("pause: %d %s", code, body)
	}
	for range 2 {
		if code, _ := get(t, base+"/api/v1/jobs", "Authorization", "Bearer wrong-secret"); code != 401 {
			t.Errorf("a wrong token: %d", code)
		}
	}
	// --login-failures 2/1h: the third try waits 30 minutes.
	code, _, header := getHeader(t, base+"/api/v1/jobs", "Authorization", "Bearer operator-secret")
	if code != http.StatusTooManyRequests || header.Get("Retry-After") != "1800" {
		t.Errorf("after 2 failures: %d, Retry-After %q", code, header.Get("Retry-After"))
	}
	got := log.String()
	for _, want := range []string{
		`msg="weirui: change" user="token `, "role=operator client=127.0.0.1 method=POST path=/api/v1/queues/mail/pause action=queue.pause queue=mail status=200 result=ok",
		`msg="weirui: login failed" client=127.0.0.1 method=GET path=/api/v1/jobs scheme=bearer reason="unknown token"`,
		`msg="weirui: failed logins throttled" client=127.0.0.1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stderr lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "secret") {
		t.Errorf("stderr holds a token:\n%s", got)
	}
}

func TestServeHashPassword(t *testing.T) {
	t.Parallel()
	r := runWeirStdin(t, nil, "correct horse\n", "serve", "--hash-password")
	wantOK(t, r)
	hash := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(hash, "pbkdf2-sha256$") || strings.Contains(hash, "correct") {
		t.Fatalf("hash %q", hash)
	}
	if _, err := weirui.ParseAuthFile(strings.NewReader("viewer:user:ada:" + hash)); err != nil {
		t.Errorf("the auth file refuses the hash: %v", err)
	}
	wantFailure(t, runWeirStdin(t, nil, "\n", "serve", "--hash-password"), exitUsage, "no password")
}

func TestServeHelp(t *testing.T) {
	t.Parallel()
	r := runWeir(t, nil, "help", "serve")
	wantOK(t, r)
	for _, s := range []string{"weir serve", "-addr", "-auth-file", "-trust-proxy-header", "-trusted-proxy", "-hash-password", "sha256sum", "/healthz", "/readyz", "/metrics", "-metrics-public",
		"-show-errors-to-viewers", "-login-failures", "-allow-writable-auth-file", "audit log"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("help does not mention %q", s)
		}
	}
}

// serving runs weir serve until the test ends and returns its base URL.
func serving(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	base, _ := servingLog(t, env, args...)
	return base
}

// lockedBuffer is a buffer that a server writes while a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// servingLog is serving, and returns what weir serve writes on stderr too.
func servingLog(t *testing.T, env map[string]string, args ...string) (string, *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stderr := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		code := run(ctx, append([]string{"serve"}, args...), strings.NewReader(""), pw, stderr, func(k string) string { return env[k] })
		pw.Close()
		done <- code
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("weir serve exited %d: %s", code, stderr.String())
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr) //nolint:errcheck // drains until serve returns
	if err != nil {
		t.Fatalf("weir serve printed no address: %v", err)
	}
	_, rest, ok := strings.Cut(line, "listening on ")
	if !ok {
		t.Fatalf("weir serve: %q", line)
	}
	base, _, _ := strings.Cut(rest, " ")
	return strings.TrimSuffix(base, "/"), stderr
}

func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	code, body, _ := send(t, "GET", url, header...)
	return code, body
}

func getHeader(t *testing.T, url string, header ...string) (int, string, http.Header) {
	t.Helper()
	return send(t, "GET", url, header...)
}

func post(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	code, body, _ := send(t, "POST", url, header...)
	return code, body
}

// send sends a request without a body, with the header's name-value pairs
// ("Host" sets the Host), and returns the answer.
func send(t *testing.T, method, url string, header ...string) (int, string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b), res.Header
}

// viewerAuthFile writes an auth file that gives token a viewer's role.
func viewerAuthFile(t *testing.T, token string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(token))
	path := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(path, []byte("viewer:token:sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServe(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	env := map[string]string{envDatabaseURL: dbtest.URL()}

	base := serving(t, env, "--schema", schema, "--addr", "127.0.0.1:0")
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/": "Overview", "/api/v1/session": `"role": "operator"`} {
		if code, body := get(t, base+path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %q", path, code, body)
		}
	}

	// Without authentication, a Host that is not loopback (DNS rebinding) is refused.
	for host, want := range map[string]int{"evil.example": 421, "evil.example:80": 421, "localhost": 200, "127.0.0.1:1": 200, "[::1]:8080": 200} {
		code, _ := get(t, base+"/jobs", "Host", host)
		if code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
	}

	// With an auth file, under a base path.
	authFile := viewerAuthFile(t, "secret-token")
	base = serving(t, env, "--schema", schema, "--addr", "127.0.0.1:0", "--auth-file", authFile, "--base-path", "/weir")
	if !strings.HasSuffix(base, "/weir") {
		t.Fatalf("base %q", base)
	}
	root := strings.TrimSuffix(base, "/weir")
	if code, _ := get(t, root+"/healthz"); code != 200 {
		t.Errorf("healthz: %d", code)
	}
	if code, _ := get(t, base+"/jobs"); code != 401 {
		t.Errorf("without the token: %d", code)
	}
	code, body := get(t, base+"/jobs", "Authorization", "Bearer secret-token")
	if code != 200 || !strings.Contains(body, `href="/weir/static/style.css"`) {
		t.Errorf("with the token: %d", code)
	}

	// A schema that is not migrated is not ready.
	bare := dbtest.Schema(t)
	base = serving(t, env, "--schema", bare, "--addr", "127.0.0.1:0")
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("readyz on an empty schema: %d", code)
	}
}

func TestServeSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "weir.db")
	f := newSQLiteFixture(t, path)
	base := serving(t, f.env, "--addr", "127.0.0.1:0")
	for path, want := range map[string]string{"/readyz": "ready", "/api/v1/queues": `"queues"`, "/jobs": "Jobs", "/api/v1/jobs?state=retryable": `"state": "retryable"`} {
		if code, body := get(t, base+path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %q", path, code, body)
		}
	}
}

// TestServeMetrics: /metrics reports the queues' depth by state, the oldest
// available job's age, the leader, whether the database answered and the
// dashboard's requests; never a job's args. It sits behind the dashboard's
// authentication (under --base-path), or without it beside /healthz with
// --metrics-public.
func TestServeMetrics(t *testing.T) {
	t.Parallel()
	schema := dbtest.Schema(t)
	migrateUp(t, schema)
	pool := dbtest.Pool(t, nil)
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+pgx.Identifier{schema, "weir_job"}.Sanitize()+
		` (queue, kind, args, max_attempts, scheduled_at) VALUES ('mail', 'send', '{"token": "s3cret-arg"}', 3, now() - interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Executor().LeaderElect(t.Context(), &weirdriver.LeaderElectParams{
		Name: "maintenance", LeaderID: "web-1-42", TTL: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envDatabaseURL: dbtest.URL()}
	authFile := viewerAuthFile(t, "secret-token")
	check := func(what, body string) {
		t.Helper()
		for _, want := range []string{
			`weir_serve_queue_jobs{messaging_destination_name="mail",weir_job_state="available"} 1`,
			`weir_serve_queue_jobs{messaging_destination_name="mail",weir_job_state="completed"} 0`,
			`weir_serve_queue_oldest_available_age_seconds{messaging_destination_name="mail"} `,
			`weir_serve_leader{leader_id="web-1-42"} 1`,
			"weir_serve_leader_term_remaining_seconds ",
			"weir_serve_database_up 1",
			`weir_serve_http_requests_total{code="401",method="get"} `,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: no %q in:\n%s", what, want, body)
			}
		}
		if strings.Contains(body, "s3cret-arg") || strings.Contains(body, "secret-token") {
			t.Errorf("%s: /metrics shows a job's args or the token", what)
		}
	}

	base := serving(t, env, "--schema", schema, "--addr", "127.0.0.1:0", "--auth-file", authFile, "--base-path", "/weir")
	root := strings.TrimSuffix(base, "/weir")
	if code, _ := get(t, base+"/metrics"); code != 401 {
		t.Errorf("/weir/metrics without the token: %d, want 401", code)
	}
	if code, _ := get(t, root+"/metrics"); code != 404 {
		t.Errorf("/metrics beside /healthz without --metrics-public: %d, want 404", code)
	}
	code, body := get(t, base+"/metrics", "Authorization", "Bearer secret-token")
	if code != 200 {
		t.Fatalf("/weir/metrics with the token: %d %s", code, body)
	}
	check("behind authentication", body)

	base = serving(t, env, "--schema", schema, "--addr", "127.0.0.1:0", "--auth-file", authFile, "--metrics-public")
	if code, _ := get(t, base+"/jobs"); code != 401 {
		t.Errorf("--metrics-public: /jobs without the token: %d, want 401", code)
	}
	code, body = get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("--metrics-public: /metrics: %d %s", code, body)
	}
	check("--metrics-public", body)

	// A schema that is not migrated: the database is not up, and /metrics still answers.
	bare := dbtest.Schema(t)
	base = serving(t, env, "--schema", bare, "--addr", "127.0.0.1:0", "--metrics-public")
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "weir_serve_database_up 0") {
		t.Errorf("/metrics on an empty schema: %d %s", code, body)
	}
}
