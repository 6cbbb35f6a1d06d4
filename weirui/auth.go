package weirui

import (
	"bufio"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirq/weir"
)

// Role is what a user of the dashboard may do.
type Role int

const (
	// RoleNone may do nothing: a proxy user not listed, with no default role.
	RoleNone Role = iota
	// RoleViewer reads jobs, queues and schedules.
	RoleViewer
	// RoleOperator also retries, cancels and deletes jobs, pauses and resumes
	// queues and schedules, and triggers schedules.
	RoleOperator
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	}
	return "none"
}

// ParseRole reads "viewer", "operator" or "none".
func ParseRole(s string) (Role, error) {
	switch s {
	case "viewer":
		return RoleViewer, nil
	case "operator":
		return RoleOperator, nil
	case "none":
		return RoleNone, nil
	}
	return RoleNone, fmt.Errorf("role %q is not viewer, operator or none", s)
}

// Token is a bearer token, known by its SHA-256 only.
type Token struct {
	Role Role
	// SHA256 is the SHA-256 of the token as the client sends it.
	SHA256 [32]byte
}

// User is an HTTP basic user with a password hash made by HashPassword.
type User struct {
	Role         Role
	Name         string
	PasswordHash string
}

// Auth says who may use the dashboard. A request is authenticated by the
// first of: a user header set by a trusted proxy, a bearer token, HTTP basic.
type Auth struct {
	Tokens []Token
	Users  []User
	// ProxyHeader names the header in which a reverse proxy passes the user
	// it authenticated, such as X-Forwarded-User. It is read only on
	// requests whose peer address is in TrustedProxies; elsewhere it is
	// ignored. A request from a trusted proxy that carries it more than once
	// is refused (400).
	ProxyHeader    string
	TrustedProxies []netip.Prefix
	// ProxyUsers gives proxy users their role; users not listed get
	// ProxyDefaultRole (RoleNone refuses them).
	ProxyUsers       map[string]Role
	ProxyDefaultRole Role
}

// configured reports whether any way to authenticate is set.
func (a *Auth) configured() bool {
	return a != nil && (len(a.Tokens) > 0 || len(a.Users) > 0 || a.ProxyHeader != "")
}

// Validate says what is wrong with a, if anything, with an *InvalidError:
// NewHandler calls it.
func (a *Auth) Validate() error {
	if a == nil {
		return nil
	}
	for i, t := range a.Tokens {
		if t.Role != RoleViewer && t.Role != RoleOperator {
			return invalidf(fmt.Sprintf("Auth.Tokens[%d]", i), "Auth.Tokens[%d]: role %s is not viewer or operator", i, t.Role)
		}
	}
	for i, u := range a.Users {
		if u.Role != RoleViewer && u.Role != RoleOperator {
			return invalidf(fmt.Sprintf("Auth.Users[%d]", i), "Auth.Users[%d]: role %s is not viewer or operator", i, u.Role)
		}
		if u.Name == "" || strings.ContainsAny(u.Name, ":\x00") {
			return invalidf(fmt.Sprintf("Auth.Users[%d]", i), "Auth.Users[%d]: user name %q is empty or holds a colon", i, u.Name)
		}
		if _, err := parseHash(u.PasswordHash); err != nil {
			return invalidf(fmt.Sprintf("Auth.Users[%d]", i), "Auth.Users[%d] (%s): %v", i, u.Name, err)
		}
	}
	if a.ProxyHeader != "" && len(a.TrustedProxies) == 0 {
		return invalidf("Auth.TrustedProxies", "Auth.ProxyHeader is set but Auth.TrustedProxies is empty: no proxy would be trusted")
	}
	if a.ProxyHeader == "" && len(a.TrustedProxies) > 0 {
		return invalidf("Auth.ProxyHeader", "Auth.TrustedProxies is set but Auth.ProxyHeader is empty")
	}
	if a.ProxyHeader != "" && !validHeaderName(a.ProxyHeader) {
		return invalidf("Auth.ProxyHeader", "Auth.ProxyHeader %q is not a header name", a.ProxyHeader)
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// identity is who made a request: its role and a name that ties the CSRF
// token to the credentials.
type identity struct {
	role Role
	// name is shown on the pages: a user's name, or "token" and the first
	// characters of its hash.
	name string
	// key ties the CSRF token to the credentials.
	key string
	// bearer is set when the request carried a bearer token, which a browser
	// never sends by itself: such a request needs no CSRF token.
	bearer bool
}

// errUnauthenticated answers a request that carries no credentials.
var errUnauthenticated = errors.New("authentication required")

// loginError is a failed login. The client is told "bad credentials" and no
// more; the log gets the rest, which holds no secret.
type loginError struct {
	// scheme is "bearer", "basic" or "other".
	scheme string
	// user is the name of a configured user whose password was wrong; empty
	// for a name that is not configured, which may be a password typed in
	// the wrong field.
	user   string
	reason string
	// throttled is set when this failure emptied the address's bucket.
	throttled bool
}

func (e *loginError) Error() string { return "bad credentials" }

// throttledError refuses a request with credentials from an address that
// failed to log in too often: wait is how long until one more try.
type throttledError struct{ wait time.Duration }

func (e *throttledError) Error() string {
	return fmt.Sprintf("too many failed logins from this address: try again in %d s", retryAfter(e.wait))
}

// repeatedHeaderError refuses a request from a trusted proxy that carries the
// user header more than once: a proxy that appends its header to the client's
// rather than replacing it would let whichever value is read first name the
// user, the client's own.
type repeatedHeaderError struct{ header string }

func (e *repeatedHeaderError) Error() string {
	return "the header " + e.header + " appears more than once: the proxy must replace the client's, not add its own"
}

// authenticator checks requests against an Auth.
type authenticator struct {
	auth      *Auth
	anonymous bool
	// verified remembers the basic credentials already checked, by an HMAC
	// of name and password, so that the slow hash runs once per password.
	mu       sync.Mutex
	verified map[[32]byte]bool
	cacheKey []byte
	hashing  chan struct{}
	// logins limits failed logins by client address.
	logins *loginLimiter
}

const maxVerified = 1024

func newAuthenticator(a *Auth, anonymous bool, failedLogins weir.RateLimit) *authenticator {
	key := make([]byte, 32)
	rand.Read(key)
	return &authenticator{auth: a, anonymous: anonymous, verified: map[[32]byte]bool{}, cacheKey: key,
		hashing: make(chan struct{}, runtime.GOMAXPROCS(0)), logins: newLoginLimiter(failedLogins)}
}

// authenticate says who made r, or why not: errUnauthenticated, a
// *loginError, a *throttledError or a *repeatedHeaderError.
func (au *authenticator) authenticate(r *http.Request) (*identity, error) {
	a := au.auth
	if a != nil && a.ProxyHeader != "" && au.fromTrustedProxy(r) {
		if len(r.Header.Values(a.ProxyHeader)) > 1 {
			return nil, &repeatedHeaderError{a.ProxyHeader}
		}
		if user := r.Header.Get(a.ProxyHeader); user != "" {
			role, ok := a.ProxyUsers[user]
			if !ok {
				role = a.ProxyDefaultRole
			}
			return &identity{role: role, name: user, key: "proxy\x00" + user}, nil
		}
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		if au.anonymous {
			return &identity{role: RoleOperator, name: "anonymous", key: "anonymous"}, nil
		}
		return nil, errUnauthenticated
	}
	key := clientKey(r)
	if wait := au.logins.wait(key); wait > 0 {
		return nil, &throttledError{wait}
	}
	id, lerr := au.credentials(r, h)
	if lerr != nil {
		lerr.throttled = au.logins.failed(key)
		return nil, lerr
	}
	return id, nil
}

// credentials checks the bearer token or basic credentials of r, whose
// Authorization header is h.
func (au *authenticator) credentials(r *http.Request, h string) (*identity, *loginError) {
	a := au.auth
	if scheme, rest, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		if a == nil {
			return nil, &loginError{scheme: "bearer", reason: "unknown token"}
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(rest)))
		match := -1
		for i := range a.Tokens {
			// Every token is compared, in constant time each.
			if subtle.ConstantTimeCompare(sum[:], a.Tokens[i].SHA256[:]) == 1 {
				match = i
			}
		}
		if match < 0 {
			return nil, &loginError{scheme: "bearer", reason: "unknown token"}
		}
		id := hex.EncodeToString(a.Tokens[match].SHA256[:4])
		return &identity{role: a.Tokens[match].Role, name: "token " + id, key: "token\x00" + id, bearer: true}, nil
	}
	name, password, ok := r.BasicAuth()
	if !ok || a == nil {
		return nil, &loginError{scheme: "other", reason: "neither a bearer token nor basic credentials that this dashboard takes"}
	}
	for _, u := range a.Users {
		if subtle.ConstantTimeCompare([]byte(u.Name), []byte(name)) == 1 {
			if au.checkPassword(u, password) {
				return &identity{role: u.Role, name: u.Name, key: "user\x00" + u.Name}, nil
			}
			return nil, &loginError{scheme: "basic", user: u.Name, reason: "wrong password"}
		}
	}
	// An unknown user costs the hash a known one does, so that the time
	// of the answer does not tell which names exist.
	au.hashing <- struct{}{}
	verifyPassword(unknownUserHash, password)
	<-au.hashing
	return nil, &loginError{scheme: "basic", reason: "unknown user"}
}

func (au *authenticator) fromTrustedProxy(r *http.Request) bool {
	addr, err := netip.ParseAddr(clientAddr(r))
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range au.auth.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func (au *authenticator) checkPassword(u User, password string) bool {
	mac := hmac.New(sha256.New, au.cacheKey)
	mac.Write([]byte(u.Name))
	mac.Write([]byte{0})
	mac.Write([]byte(u.PasswordHash))
	mac.Write([]byte{0})
	mac.Write([]byte(password))
	var k [32]byte
	copy(k[:], mac.Sum(nil))
	au.mu.Lock()
	ok := au.verified[k]
	au.mu.Unlock()
	if ok {
		return true
	}
	// The slow hash runs on at most as many requests at once as there are
	// CPUs, so that a flood of wrong passwords queues instead of starving
	// the process.
	au.hashing <- struct{}{}
	ok = verifyPassword(u.PasswordHash, password)
	<-au.hashing
	if !ok {
		return false
	}
	au.mu.Lock()
	if len(au.verified) >= maxVerified {
		clear(au.verified)
	}
	au.verified[k] = true
	au.mu.Unlock()
	return true
}

// Password hashes are "pbkdf2-sha256$ITERATIONS$SALT$KEY", salt and key in
// unpadded base64url.
const (
	hashPrefix        = "pbkdf2-sha256"
	defaultIterations = 210_000
	minIterations     = 10_000
	maxIterations     = 10_000_000
)

// unknownUserHash is checked for a user name that is not configured.
const unknownUserHash = "pbkdf2-sha256$210000$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

type passwordHash struct {
	iter      int
	salt, key []byte
}

func parseHash(s string) (*passwordHash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 4 || parts[0] != hashPrefix {
		return nil, errors.New("password hash is not pbkdf2-sha256$ITERATIONS$SALT$KEY (make one with `weir serve --hash-password`)")
	}
	iter, err := strconv.Atoi(parts[1])
	if err != nil || iter < minIterations || iter > maxIterations {
		return nil, fmt.Errorf("password hash: iterations %q out of range %d..%d", parts[1], minIterations, maxIterations)
	}
	salt, err1 := base64.RawURLEncoding.DecodeString(parts[2])
	key, err2 := base64.RawURLEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil || len(salt) < 8 || len(key) != sha256.Size {
		return nil, errors.New("password hash: salt or key is not valid base64url of the right length")
	}
	return &passwordHash{iter: iter, salt: salt, key: key}, nil
}

// HashPassword returns the hash of password that User.PasswordHash and the
// auth file take: PBKDF2 with SHA-256, a random salt and 210,000 iterations.
func HashPassword(password string) (string, error) {
	if password == "" {
		return "", invalidf("password", "the password is empty")
	}
	salt := make([]byte, 16)
	rand.Read(salt)
	key, err := pbkdf2.Key(sha256.New, password, salt, defaultIterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("weirui: %w", err)
	}
	return fmt.Sprintf("%s$%d$%s$%s", hashPrefix, defaultIterations,
		base64.RawURLEncoding.EncodeToString(salt), base64.RawURLEncoding.EncodeToString(key)), nil
}

func verifyPassword(hash, password string) bool {
	h, err := parseHash(hash)
	if err != nil {
		return false
	}
	key, err := pbkdf2.Key(sha256.New, password, h.salt, h.iter, sha256.Size)
	if err != nil {
		return false
	}
	return subtle.ConstantTimeCompare(key, h.key) == 1
}

// ParseAuthFile reads an auth file: one credential a line, blank lines and
// lines starting with # ignored.
//
//	ROLE:token:sha256:HEX          a bearer token, by the hex SHA-256 of the token
//	ROLE:user:NAME:HASH            an HTTP basic user; HASH from HashPassword
//	ROLE:proxy-user:NAME           the role of a user a trusted proxy names
//
// ROLE is viewer or operator. Errors name the line, never its secret.
func ParseAuthFile(r io.Reader) (*Auth, error) {
	a := &Auth{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, ":", 4)
		if len(parts) < 3 {
			return nil, fmt.Errorf("line %d: want ROLE:token:sha256:HEX, ROLE:user:NAME:HASH or ROLE:proxy-user:NAME", n)
		}
		role, err := ParseRole(parts[0])
		if err != nil || role == RoleNone {
			return nil, fmt.Errorf("line %d: role %q is not viewer or operator", n, parts[0])
		}
		switch parts[1] {
		case "token":
			if len(parts) != 4 || parts[2] != "sha256" {
				return nil, fmt.Errorf("line %d: a token line is ROLE:token:sha256:HEX, the hex SHA-256 of the token (not the token itself)", n)
			}
			sum, err := hex.DecodeString(parts[3])
			if err != nil || len(sum) != sha256.Size {
				return nil, fmt.Errorf("line %d: the token's SHA-256 is not 64 hex digits", n)
			}
			t := Token{Role: role}
			copy(t.SHA256[:], sum)
			a.Tokens = append(a.Tokens, t)
		case "user":
			if len(parts) != 4 || parts[2] == "" {
				return nil, fmt.Errorf("line %d: a user line is ROLE:user:NAME:HASH", n)
			}
			if _, err := parseHash(parts[3]); err != nil {
				return nil, fmt.Errorf("line %d (user %s): %v", n, parts[2], err)
			}
			a.Users = append(a.Users, User{Role: role, Name: parts[2], PasswordHash: parts[3]})
		case "proxy-user":
			if len(parts) != 3 || parts[2] == "" {
				return nil, fmt.Errorf("line %d: a proxy user line is ROLE:proxy-user:NAME", n)
			}
			if a.ProxyUsers == nil {
				a.ProxyUsers = map[string]Role{}
			}
			a.ProxyUsers[parts[2]] = role
		default:
			return nil, fmt.Errorf("line %d: kind %q is not token, user or proxy-user", n, parts[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return a, nil
}
