package weir

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// Defaults for inserted jobs.
const (
	DefaultQueue       = "default"
	DefaultPriority    = 2
	DefaultMaxAttempts = 25
	// MaxMaxAttempts is the most attempts a job may be given.
	MaxMaxAttempts = 10_000
	// MaxTags is the most tags a job may carry.
	MaxTags = 32
)

// InsertOpts are options for inserting a job. The zero value of each field means
// its default.
type InsertOpts struct {
	// Queue is the queue the job runs in. Default: "default".
	Queue string
	// Priority runs from 1 (first) to 4 (last). Default: 2.
	Priority int
	// ScheduledAt is when the job becomes due. Default: now. A time in the past
	// makes the job due at once.
	ScheduledAt time.Time
	// MaxAttempts is how many attempts the job gets before it is discarded.
	// Default: 25.
	MaxAttempts int
	// Tags label the job for operators. Each follows the name rules below.
	Tags []string
	// Metadata is a JSON object stored with the job for the caller's own use.
	Metadata json.RawMessage
	// Unique makes the insert a no-op returning the existing job when a job with
	// the same unique key exists.
	Unique UniqueOpts
}

// UniqueOpts says what makes a job unique. A job is unique by its kind, plus its
// args, queue and time period when the matching field is set, among the jobs whose
// state is in ByState. The zero value means not unique.
type UniqueOpts struct {
	// ByArgs includes the job's encoded arguments (with object keys sorted) in the key.
	ByArgs bool
	// ByPeriod includes the period the job is scheduled in: jobs scheduled in the
	// same ByPeriod-long window (aligned to the Unix epoch) collide. At least one
	// second when set; counted in whole seconds.
	ByPeriod time.Duration
	// ByQueue includes the job's queue in the key.
	ByQueue bool
	// ByState is the set of states among which the key is unique. It must hold
	// scheduled, available, running and retryable, so that no state change can make
	// two jobs collide. Default: every state but cancelled and discarded.
	ByState []JobState
	// ByArgsKeys names the top-level keys of the encoded args that the key
	// includes, in place of all args: the key covers the JSON object made of
	// those of them the args hold (a key the args lack is left out). Setting it
	// implies ByArgs. With ByArgs and no ByArgsKeys, the fields of the args
	// struct tagged `weir:"unique"` give the keys (their JSON names); an args
	// type without such a field puts all its args in the key. At most 32 keys,
	// each 1 to 128 bytes of UTF-8, none listed twice.
	ByArgsKeys []string
	// OnConflict says what the insert does when a job holds its key. Default
	// (empty): UniqueSkip. It needs the job to be unique by something else.
	OnConflict UniqueConflict
}

// UniqueConflict is what a unique insert does when another job holds its key.
// Whatever the mode, a running or final holder is never changed: the insert
// returns it as a duplicate.
type UniqueConflict string

// The conflict modes.
const (
	// UniqueSkip inserts nothing and returns the holder as it is (Duplicate).
	UniqueSkip UniqueConflict = "skip"
	// UniqueReplace gives a pending holder (scheduled, available or retryable)
	// the insert's args, metadata, tags, priority and max attempts; its queue,
	// scheduled time, state and attempts stay (Duplicate and Replaced).
	UniqueReplace UniqueConflict = "replace"
	// UniqueDebounce replaces as UniqueReplace does and moves the holder's
	// scheduled time to the insert's (now when it has none), so that each insert
	// pushes the run back: the holder becomes available when that time has come
	// and is scheduled otherwise (a retryable holder stays retryable).
	UniqueDebounce UniqueConflict = "debounce"
)

// driverMode is m as the driver takes it; m has been checked.
func (m UniqueConflict) driverMode() weirdriver.UniqueOnConflict {
	switch m {
	case UniqueReplace:
		return weirdriver.UniqueOnConflictReplace
	case UniqueDebounce:
		return weirdriver.UniqueOnConflictDebounce
	}
	return weirdriver.UniqueOnConflictSkip
}

func (u *UniqueOpts) isZero() bool {
	return !u.ByArgs && u.ByPeriod == 0 && !u.ByQueue && len(u.ByState) == 0 &&
		len(u.ByArgsKeys) == 0 && (u.OnConflict == "" || u.OnConflict == UniqueSkip)
}

// defaultUniqueStates are the states a unique key holds in by default.
var defaultUniqueStates = []JobState{
	JobStateScheduled, JobStateAvailable, JobStateRunning, JobStateRetryable, JobStateCompleted,
}

// requiredUniqueStates must be in every ByState.
var requiredUniqueStates = []JobState{
	JobStateScheduled, JobStateAvailable, JobStateRunning, JobStateRetryable,
}

// nameOK reports whether name is in the character set of kinds, queues and tags:
// ASCII letters and digits, then also '_', '.', ':' and '-'. (A loop, not a regexp:
// it runs for every inserted job.)
func nameOK(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// maxNameLen is the longest kind, queue or tag, in bytes.
const maxNameLen = 128

// validateName checks a kind, queue or tag name.
func validateName(field, what, name string) error {
	switch {
	case name == "":
		return invalidf(field, "%s is empty", what)
	case len(name) > maxNameLen:
		return invalidf(field, "%s %q is %d bytes long; the limit is %d", what, truncate(name), len(name), maxNameLen)
	case !nameOK(name):
		return invalidf(field, "%s %q has characters outside [A-Za-z0-9_.:-] or does not start with a letter or digit", what, name)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// InsertParams is a job about to be inserted, as insert middleware sees it: its
// args encoded, the call's options laid over the kind's own, and the defaults
// applied. Middleware may change any field; the client checks every field after
// the middleware, as it checks a caller's input, so a change cannot slip bad
// input past it.
type InsertParams struct {
	Kind string
	// Args is the job's args as JSON: a JSON object.
	Args        json.RawMessage
	Queue       string
	Priority    int
	MaxAttempts int
	// ScheduledAt is when the job becomes due; zero means now.
	ScheduledAt time.Time
	Tags        []string
	// Metadata is a JSON object, or empty.
	Metadata json.RawMessage
	// Unique is the job's unique options; when ByArgs is set without
	// ByArgsKeys, ByArgsKeys holds the JSON names of the args type's fields
	// tagged `weir:"unique"` (none: all args).
	Unique UniqueOpts

	// encoded is Args as encodeInsert wrote it, to tell whether middleware
	// replaced it; goJSON is set when encoding/json wrote it from a Go value
	// (not the value's own MarshalJSON): then \ufffd in it may stand for invalid
	// UTF-8.
	encoded json.RawMessage
	goJSON  bool
	// periodicKey, set on a periodic job's slot, is its unique key in every
	// state, in place of Unique's.
	periodicKey []byte
}

// encodeInsert encodes args and lays opts over the kind's own, with the
// defaults applied. Only what stops the encoding is checked here; checkInsert
// checks the rest.
func encodeInsert(args JobArgs, opts *InsertOpts) (*InsertParams, error) {
	if args == nil {
		return nil, invalidf("Args", "args are nil")
	}
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		// Kind and MarshalJSON would dereference it.
		return nil, invalidf("Args", "args are a nil %T", args)
	}
	kind := args.Kind()
	encoded, err := json.Marshal(args)
	if err != nil {
		return nil, invalidf("Args", "args of kind %q do not encode as JSON: %v", kind, err)
	}
	_, ownJSON := args.(json.Marshaler)
	merged := mergeOpts(args, opts)
	if merged.Unique.ByArgs && len(merged.Unique.ByArgsKeys) == 0 {
		keys, err := uniqueTagKeys(reflect.TypeOf(args))
		if err != nil {
			return nil, invalidf("Args", "args of kind %q: %v", kind, err)
		}
		merged.Unique.ByArgsKeys = keys
	}
	p := &InsertParams{
		Kind: kind, Args: encoded, Queue: merged.Queue, Priority: merged.Priority,
		MaxAttempts: merged.MaxAttempts, ScheduledAt: merged.ScheduledAt, Tags: merged.Tags,
		Metadata: merged.Metadata, Unique: merged.Unique, encoded: encoded, goJSON: !ownJSON,
	}
	if p.Queue == "" {
		p.Queue = DefaultQueue
	}
	if p.Priority == 0 {
		p.Priority = DefaultPriority
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	return p, nil
}

// checkInsert checks a job to insert and returns what the driver writes. now is
// the client's clock, used only to place a unique job in its period. check
// reads the args' and metadata's JSON once more for what the stores cannot keep
// alike; one checker serves a whole batch.
func (c *Client) checkInsert(in *InsertParams, now time.Time, check *jsonChecker) (*weirdriver.JobInsertParams, error) {
	if in == nil {
		return nil, invalidf("params", "the job is nil")
	}
	kind := in.Kind
	if err := validateName("Kind", "kind", kind); err != nil {
		return nil, err
	}
	if len(in.Args) > c.config.MaxArgsBytes {
		return nil, invalidf("Args", "args of kind %q are %d bytes; the limit is %d (Config.MaxArgsBytes)", kind, len(in.Args), c.config.MaxArgsBytes)
	}
	// json.Marshal wrote valid JSON; args that insert middleware may have
	// changed are read again.
	asEncoded := sameBytes(in.Args, in.encoded)
	reread := !asEncoded || len(c.config.InsertMiddleware) > 0
	if !isJSONObject(in.Args) || reread && !json.Valid(in.Args) {
		return nil, invalidf("Args", "args of kind %q must encode to a JSON object, got %s", kind, truncate(string(in.Args)))
	}
	// encoding/json writes invalid UTF-8 in a Go string as \ufffd; JSON from the
	// caller's own MarshalJSON (RawArgs) or from middleware is kept as written,
	// where \ufffd is a replacement character meant as such.
	if err := check.check(in.Args, in.goJSON && asEncoded); err != nil {
		return nil, invalidf("Args", "args of kind %q have %v", kind, err)
	}
	p := &weirdriver.JobInsertParams{
		Kind: kind, Queue: in.Queue, Args: in.Args, Priority: in.Priority,
		MaxAttempts: in.MaxAttempts, ScheduledAt: in.ScheduledAt, Tags: in.Tags,
	}
	if !p.ScheduledAt.IsZero() {
		if err := checkTime("InsertOpts.ScheduledAt", "scheduled time", p.ScheduledAt); err != nil {
			return nil, err
		}
	}
	if err := validateName("InsertOpts.Queue", "queue", p.Queue); err != nil {
		return nil, err
	}
	if p.Priority < 1 || p.Priority > 4 {
		return nil, invalidf("InsertOpts.Priority", "priority %d is out of range 1..4", p.Priority)
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > MaxMaxAttempts {
		return nil, invalidf("InsertOpts.MaxAttempts", "max attempts %d is out of range 1..%d", p.MaxAttempts, MaxMaxAttempts)
	}
	if err := checkTags("InsertOpts.Tags", p.Tags); err != nil {
		return nil, err
	}
	if len(in.Metadata) > 0 {
		meta, err := c.checkMetadata("InsertOpts.Metadata", in.Metadata, check)
		if err != nil {
			return nil, err
		}
		p.Metadata = meta
	}
	switch {
	case in.periodicKey != nil:
		// A periodic slot's job: unique by its slot in every state, whatever
		// the options or middleware say, and never replaced (the zero mode).
		p.UniqueKey, p.UniqueStates = in.periodicKey, weirtype.JobStates()
	case !in.Unique.isZero():
		if err := setUnique(p, &in.Unique, now); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// checkMetadata checks metadata given in field (a JSON object within
// Config.MaxArgsBytes, with nothing the stores refuse) and returns it compacted.
func (c *Client) checkMetadata(field string, meta json.RawMessage, check *jsonChecker) (json.RawMessage, error) {
	if !json.Valid(meta) || !isJSONObject(meta) {
		return nil, invalidf(field, "metadata must be a JSON object, got %s", truncate(string(meta)))
	}
	if len(meta) > c.config.MaxArgsBytes {
		return nil, invalidf(field, "metadata is %d bytes; the limit is %d (Config.MaxArgsBytes)", len(meta), c.config.MaxArgsBytes)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, meta); err != nil {
		return nil, invalidf(field, "metadata is not valid JSON: %v", err)
	}
	if err := check.check(compact.Bytes(), false); err != nil {
		return nil, invalidf(field, "metadata has %v", err)
	}
	return compact.Bytes(), nil
}

// checkTags checks tags given in field: at most MaxTags, each a valid name.
func checkTags(field string, tags []string) error {
	if len(tags) > MaxTags {
		return invalidf(field, "%d tags given; the limit is %d", len(tags), MaxTags)
	}
	for _, tag := range tags {
		if err := validateName(field, "tag", tag); err != nil {
			return err
		}
	}
	return nil
}

// sameBytes reports whether a and b are the same slice of the same array.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// mergeOpts lays opts over the kind's own defaults, field by field.
func mergeOpts(args JobArgs, opts *InsertOpts) InsertOpts {
	var merged InsertOpts
	if withOpts, ok := args.(JobArgsWithInsertOpts); ok {
		merged = withOpts.InsertOpts()
	}
	if opts == nil {
		return merged
	}
	if opts.Queue != "" {
		merged.Queue = opts.Queue
	}
	if opts.Priority != 0 {
		merged.Priority = opts.Priority
	}
	if !opts.ScheduledAt.IsZero() {
		merged.ScheduledAt = opts.ScheduledAt
	}
	if opts.MaxAttempts != 0 {
		merged.MaxAttempts = opts.MaxAttempts
	}
	if opts.Tags != nil {
		merged.Tags = opts.Tags
	}
	if opts.Metadata != nil {
		merged.Metadata = opts.Metadata
	}
	if !opts.Unique.isZero() {
		merged.Unique = opts.Unique
	}
	return merged
}

// Limits on UniqueOpts.ByArgsKeys; weir_enqueue holds its unique_args_keys to
// the same.
const (
	maxUniqueArgsKeys   = 32
	maxUniqueArgsKeyLen = 128
)

// checkUniqueArgsKeys checks the names of UniqueOpts.ByArgsKeys.
func checkUniqueArgsKeys(keys []string) error {
	const field = "InsertOpts.Unique.ByArgsKeys"
	if len(keys) > maxUniqueArgsKeys {
		return invalidf(field, "%d unique args keys given; the limit is %d", len(keys), maxUniqueArgsKeys)
	}
	for i, k := range keys {
		switch {
		case k == "":
			return invalidf(field, "unique args key is empty")
		case len(k) > maxUniqueArgsKeyLen:
			return invalidf(field, "unique args key %q is %d bytes long; the limit is %d", truncate(k), len(k), maxUniqueArgsKeyLen)
		case !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0:
			// PostgreSQL's text holds neither, so weir_enqueue never sees them.
			return invalidf(field, "unique args key %q is not valid UTF-8 or holds a NUL byte", truncate(k))
		case slices.Contains(keys[:i], k):
			return invalidf(field, "unique args key %q is listed twice", k)
		}
	}
	return nil
}

// checkConflictMode checks UniqueOpts.OnConflict.
func checkConflictMode(m UniqueConflict) error {
	switch m {
	case "", UniqueSkip, UniqueReplace, UniqueDebounce:
		return nil
	}
	return invalidf("InsertOpts.Unique.OnConflict", "unique conflict mode %q is not one of skip, replace, debounce", truncate(string(m)))
}

// setUnique checks u and sets p's unique key and states.
func setUnique(p *weirdriver.JobInsertParams, u *UniqueOpts, now time.Time) error {
	if err := checkConflictMode(u.OnConflict); err != nil {
		return err
	}
	if !u.ByArgs && u.ByPeriod == 0 && !u.ByQueue && len(u.ByState) == 0 && len(u.ByArgsKeys) == 0 {
		// Not unique by anything: a mode alone would silently make the job
		// unique by its kind.
		return invalidf("InsertOpts.Unique.OnConflict", "unique conflict mode %q is set but the job is not unique", truncate(string(u.OnConflict)))
	}
	if err := checkUniqueArgsKeys(u.ByArgsKeys); err != nil {
		return err
	}
	if u.ByPeriod < 0 {
		return invalidf("InsertOpts.Unique.ByPeriod", "unique period %s is negative", u.ByPeriod)
	}
	if u.ByPeriod > 0 && u.ByPeriod < time.Second {
		return invalidf("InsertOpts.Unique.ByPeriod", "unique period %s is under one second", u.ByPeriod)
	}
	states := u.ByState
	if len(states) == 0 {
		states = defaultUniqueStates
	}
	for _, s := range states {
		if !s.Valid() {
			return invalidf("InsertOpts.Unique.ByState", "unique state %q is not a job state", s)
		}
	}
	for _, s := range requiredUniqueStates {
		if !slices.Contains(states, s) {
			return invalidf("InsertOpts.Unique.ByState", "unique states must include %q (they must hold scheduled, available, running and retryable)", s)
		}
	}

	// The same bytes as weir_unique_prefix in SQL, so that a job enqueued from SQL
	// and one from Go collide when they should.
	h := sha256.New()
	fmt.Fprintf(h, "kind=%s", p.Kind)
	if u.ByQueue {
		fmt.Fprintf(h, "\x00queue=%s", p.Queue)
	}
	if u.ByPeriod > 0 {
		at := now
		if !p.ScheduledAt.IsZero() {
			at = p.ScheduledAt
		}
		secs := int64(u.ByPeriod / time.Second)
		fmt.Fprintf(h, "\x00period=%d@%d", secs, floorDiv(at.Unix(), secs)*secs)
	}
	p.UniqueKey = h.Sum(nil)
	if u.ByArgs || len(u.ByArgsKeys) > 0 {
		canonical, err := canonicalJSON(p.Args, u.ByArgsKeys)
		if err != nil {
			return invalidf("Args", "args of kind %q: %v", p.Kind, err)
		}
		p.UniqueByArgs, p.CanonicalArgs = true, canonical
		p.UniqueArgsKeys = slices.Clone(u.ByArgsKeys)
	}
	p.UniqueStates = slices.Clone(states)
	p.UniqueOnConflict = u.OnConflict.driverMode()
	return nil
}

// floorDiv divides rounding toward minus infinity, as SQL's floor does.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// canonicalJSON re-encodes a JSON object with its keys sorted, keeping numbers as
// written, so that equal arguments give equal unique keys. With keys, only those
// top-level keys that the object holds are kept (of a key written twice, the
// last value, as jsonb keeps).
func canonicalJSON(raw []byte, keys []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if len(keys) == 0 {
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	kept := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := obj[k]; ok {
			kept[k] = v
		}
	}
	return json.Marshal(kept)
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}
