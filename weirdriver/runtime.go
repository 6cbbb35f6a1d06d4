package weirdriver

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/json"
	"slices"
	"time"

	"github.com/weirq/weir/weirtype"
)

// JobClaimParams asks for up to Max due jobs of one queue.
type JobClaimParams struct {
	// Queue is the queue to claim from.
	Queue string
	// Max is the most jobs to claim; at least 1.
	Max int
	// ClientID is the claiming client's instance id, written to attempted_by.
	ClientID string
	// LeaseDuration is how long the leases last, from the database's now(); at
	// least one microsecond.
	LeaseDuration time.Duration
	// KeyBuckets are the buckets of the queue's keys that the client holds
	// (KeyShare): of those the database still holds for it, it claims the
	// jobs as their holder, without the limit per key's count, and keeps each
	// key within the limit itself (ClaimLimit.Owned). Empty: a counted claim.
	KeyBuckets []int
	// SkipKeys are keys a claim as holder passes over: those of which the
	// client holds KeyDepth jobs waiting to start, or more.
	SkipKeys []string
}

// ClaimLimit says whether a queue's limits cut a claim short. The zero value:
// they did not (or the queue has none).
type ClaimLimit struct {
	// Limited is set when the queue's global limit, rate limit or limit per
	// key let the claim lease fewer jobs than it asked for.
	Limited bool
	// Wait, when positive, is how long from the claim until the rate limit
	// admits the next job.
	Wait time.Duration
	// Share is set when the queue's global limit cut the claim short and the
	// claiming client holds no share of it (QueueShare): such a client's
	// claims are counted against the limit, one at a time; a client that
	// holds a share claims without them, and runs at most its share's
	// handlers at once.
	Share bool
	// KeyShare is set when the queue's keys may be held (it has a limit per
	// key and no rate limit) and the claim was counted because the client
	// holds none of them: it may ask to (KeyShare).
	KeyShare bool
	// Owned is set when the client claimed as the holder of buckets of the
	// queue's keys: then Keys holds each returned job's key, in order, and no
	// job was counted against the limit per key: the client starts a job
	// only while fewer than the limit of its key run.
	Owned bool
	Keys  []string
}

// KeyDepth is how many jobs of one key a client holding its bucket may hold
// waiting in its buffer, under a limit per key of limit: a claim as holder
// takes at most this many of a key, and passes over the keys of which the
// client holds this many waiting. The jobs beyond the limit wait there, each
// starting as soon as the key's slot frees, without a round trip.
func KeyDepth(limit int) int { return limit + 3 }

// KeyBuckets is how many buckets a queue's keys fall into for KeyShare.
const KeyBuckets = 64

// KeyBucket is the bucket of key: the first byte of its MD5 sum, modulo
// KeyBuckets, as the database computes it (weir_key_bucket).
func KeyBucket(key string) int {
	sum := md5.Sum([]byte(key))
	return int(sum[0]) % KeyBuckets
}

// KeyShareParams renew, take or give up a client's buckets of a queue's
// keys.
type KeyShareParams struct {
	Queue, ClientID string
	// Release are buckets the client lets go: it starts none of their jobs
	// from now on.
	Release []int
	// GiveUp lets go of every bucket and stops asking for any.
	GiveUp bool
	// Lease is how long the buckets are held, from the database's now(),
	// unless renewed; at least a millisecond.
	Lease time.Duration
	// Want is the most handlers of the queue the client runs (its
	// MaxWorkers): the buckets are divided in proportion to it (KeyPart).
	// 0 does not say: such a client counts as wanting what the others want
	// on average.
	Want int
}

// KeyShare is what a client holds of a queue's keys.
type KeyShare struct {
	// Limit is the queue's limit per key; 0 when its keys cannot be held (it
	// has no limit per key, or a rate limit of its own or per key): then
	// the client holds no bucket and claims counted.
	Limit int
	// Key is the field the keys are read from ("args.customer_id"): when it
	// changes, the buckets held are dropped.
	Key string
	// Held are the buckets the client holds, ascending; Target is how many
	// it should hold: its part of KeyBuckets among the clients that ask, by
	// what each wants (KeyPart). A client holding more lets the rest go; one
	// holding fewer gets more as buckets come free: a bucket is taken only
	// while none of its jobs runs.
	Held   []int
	Target int
}

// QueueShareParams ask for a client's share of a queue's global limit: how
// many of the queue's handlers it may run at once.
type QueueShareParams struct {
	Queue, ClientID string
	// Want is the most handlers the client would run (its MaxWorkers for
	// the queue); 0 gives the share up, which only a client that runs none
	// of the queue's handlers may do (Keep 0).
	Want int
	// Keep is how many slots the client may be using until the answer
	// arrives: the handlers it runs, or may start, under its current share.
	// The share written is never less, whatever the limit.
	Keep int
	// Lease is how long the share holds, from the database's now(), unless
	// renewed; at least a millisecond.
	Lease time.Duration
}

// QueueShare is a client's share of a queue's global limit.
type QueueShare struct {
	// Limit is the queue's global limit; 0 when it has none, and then the
	// client holds no share.
	Limit int
	// Slots is the share the database now holds for the client: at least
	// Keep, and, with the other clients' shares and the running jobs of the
	// clients without one, at most Limit unless Keep made it more.
	Slots int
	// Fair is how many handlers the client may run at once from now on: its
	// fair part of the limit (FairShare), as far as the room the others
	// leave allows; at most Slots.
	Fair int
}

// ShareOf is another client's share of a queue's global limit, as the
// database holds it: how many handlers the client wants and the slots it holds.
type ShareOf struct {
	ClientID    string
	Want, Slots int
}

// DivideShare is the share QueueShare writes for p, given the queue's limit,
// legacy (the running jobs of the clients other than p's that hold no share)
// and the other clients' live shares: p's fair part of the limit
// (FairShare over the wants), as far as the room the others leave allows,
// but never less than p.Keep.
func DivideShare(limit, legacy int, others []ShareOf, p *QueueShareParams) QueueShare {
	wants := append(slices.Clone(others), ShareOf{ClientID: p.ClientID, Want: p.Want})
	room := limit - legacy
	for _, o := range others {
		room -= o.Slots
	}
	fair := min(FairShare(limit, wants, p.ClientID), max(room, 0))
	return QueueShare{Limit: limit, Slots: max(fair, p.Keep), Fair: fair}
}

// FairShare divides limit among the clients of wants by max-min fairness and
// returns what client me gets: each gets the same, except that one wanting
// less gets what it wants and the rest is divided among the others; what
// does not divide evenly goes one each to the first clients by id. wants
// holds each client once, me among them; its order does not matter, nor
// the Slots of its entries.
func FairShare(limit int, wants []ShareOf, me string) int {
	ws := slices.Clone(wants)
	slices.SortFunc(ws, func(a, b ShareOf) int {
		return cmp.Or(cmp.Compare(a.Want, b.Want), cmp.Compare(a.ClientID, b.ClientID))
	})
	left := max(limit, 0)
	for i, w := range ws {
		rest := len(ws) - i
		if each := left / rest; w.Want <= each {
			if w.ClientID == me {
				return max(w.Want, 0)
			}
			left -= max(w.Want, 0)
			continue
		}
		// Everyone from here wants more than an even part: each gets it, and
		// the remainder goes to the first of them by id.
		others := ws[i:]
		slices.SortFunc(others, func(a, b ShareOf) int { return cmp.Compare(a.ClientID, b.ClientID) })
		for j, o := range others {
			if o.ClientID == me {
				if j < left%rest {
					return left/rest + 1
				}
				return left / rest
			}
		}
		return 0
	}
	return 0
}

// KeyPart divides the KeyBuckets buckets of a queue's keys among the
// clients of wants and returns how many client me gets: one each first
// (while there are no more clients than buckets), then the rest in
// proportion to what each wants, a bucket each by the largest remainder
// (ties to the first by id). A client whose Want is 0 (not said) counts as
// wanting the mean of the others' (1 when none says). So equal wants divide
// the buckets evenly, the remainder one each to the first clients by id, and
// a client of 4 handlers beside one of 100 holds 3 of the 64, not half of
// them, whose keys its handlers could not keep up with. wants
// holds each client once, me among them; its order does not matter, nor the
// Slots of its entries.
func KeyPart(wants []ShareOf, me string) int {
	ws := slices.Clone(wants)
	slices.SortFunc(ws, func(a, b ShareOf) int { return cmp.Compare(a.ClientID, b.ClientID) })
	if len(ws) > KeyBuckets {
		// More clients than buckets: the first KeyBuckets by id get one.
		if i := slices.IndexFunc(ws, func(w ShareOf) bool { return w.ClientID == me }); i >= 0 && i < KeyBuckets {
			return 1
		}
		return 0
	}
	var said, n int64
	for _, w := range ws {
		if w.Want > 0 {
			said += int64(w.Want)
			n++
		}
	}
	mean := int64(1)
	if n > 0 {
		mean = max(said/n, 1)
	}
	want := func(w ShareOf) int64 {
		if w.Want > 0 {
			return int64(w.Want)
		}
		return mean
	}
	var total int64
	for _, w := range ws {
		total += want(w)
	}
	rest := int64(KeyBuckets - len(ws))
	parts := make([]int64, len(ws))
	type remainder struct {
		i   int
		rem int64 // the fraction's numerator, over total
	}
	rems := make([]remainder, len(ws))
	given := int64(0)
	for i, w := range ws {
		parts[i] = 1 + rest*want(w)/total
		given += parts[i] - 1
		rems[i] = remainder{i, rest * want(w) % total}
	}
	slices.SortStableFunc(rems, func(a, b remainder) int { return cmp.Compare(b.rem, a.rem) })
	for _, r := range rems[:rest-given] {
		parts[r.i]++
	}
	for i, w := range ws {
		if w.ClientID == me {
			return int(parts[i])
		}
	}
	return 0
}

// JobClaimIDParams name the one job JobClaimID leases.
type JobClaimIDParams struct {
	ID int64
	// ClientID and LeaseDuration are as in JobClaimParams.
	ClientID      string
	LeaseDuration time.Duration
}

// Outcome is how an attempt ended, as JobFinalize writes it.
type Outcome string

const (
	// OutcomeCompleted ends the job completed.
	OutcomeCompleted Outcome = "completed"
	// OutcomeRetry makes the job retryable at ScheduledAt (available if that is due).
	OutcomeRetry Outcome = "retry"
	// OutcomeSnooze reschedules the job at ScheduledAt without spending an attempt.
	OutcomeSnooze Outcome = "snooze"
	// OutcomeDiscard ends the job discarded.
	OutcomeDiscard Outcome = "discard"
	// OutcomeCancel ends the job cancelled.
	OutcomeCancel Outcome = "cancel"
	// OutcomeRelease gives the job back as available without spending an attempt,
	// and counts the release on the job (a handler cancelled by a graceful shutdown).
	OutcomeRelease Outcome = "release"
	// OutcomeReturn gives back a job whose handler never started (a prefetched job
	// at shutdown): available, without spending an attempt or counting a release.
	OutcomeReturn Outcome = "return"
)

// Valid reports whether o is one of the known outcomes.
func (o Outcome) Valid() bool {
	switch o {
	case OutcomeCompleted, OutcomeRetry, OutcomeSnooze, OutcomeDiscard, OutcomeCancel, OutcomeRelease, OutcomeReturn:
		return true
	}
	return false
}

// JobFinalizeParams is one fenced outcome write: it applies only while the job is
// running under the lease (ID, LeaseToken).
type JobFinalizeParams struct {
	ID         int64
	LeaseToken int64
	Outcome    Outcome
	// ScheduledAt is when a retried or snoozed job becomes due; zero means now.
	ScheduledAt time.Time
	// Error, when set, is appended to the job's errors. A zero Attempt takes the
	// job's current attempt, a zero At the database's now().
	Error *weirtype.AttemptError
	// Output, when set, is the JSON value the attempt recorded
	// (weir.RecordOutput): written to the job's output only when the outcome
	// that applies is a completion (not when a requested cancel wins), and
	// ignored otherwise. A completion without it leaves output as it was.
	Output json.RawMessage
	// Progress, when set, is the attempt's latest progress (weir.SetProgress)
	// not yet written: it replaces the job's progress whatever the outcome.
	// Unset leaves progress as it was.
	Progress json.RawMessage
}

// JobRenewParams renews a batch of leases: IDs[i] under LeaseTokens[i].
type JobRenewParams struct {
	IDs         []int64
	LeaseTokens []int64
	// LeaseDuration is the new lease length, from the database's now().
	LeaseDuration time.Duration
	// Progress, when not empty, runs parallel to IDs: Progress[i], when set,
	// is written as the job's progress by the same fenced update that renews
	// its lease (nothing when the lease is lost or busy); an unset entry
	// leaves progress as it was.
	Progress []json.RawMessage
}

// JobRenewResult says what a renewal found. Each list keeps the order of the
// params.
type JobRenewResult struct {
	// Renewed lists the leases that were still held and now run longer.
	Renewed []int64
	// Lost lists the leases that matched no running job with that token: the
	// job was rescued, re-claimed, finalized or deleted.
	Lost []int64
	// CancelRequested lists the renewed jobs whose cancel an operator requested.
	CancelRequested []int64
	// Busy lists the leases not renewed this time because another transaction
	// held the job's row locked (an outcome being written, an operator's
	// transaction): a renewal never waits for a row lock, so that it cannot
	// deadlock with the client's own outcome writes nor stall behind a lock
	// held for long. The caller renews them next time.
	Busy []int64
}

// JobRescueParams bounds a rescue of expired leases.
type JobRescueParams struct {
	// Limit is the most jobs to rescue in one statement; at least 1.
	Limit int
	// Error is the message of the error entry recorded on each rescued job;
	// empty means DefaultRescueError.
	Error string
}

// DefaultRescueError is the error a rescued job records when JobRescueParams.Error
// is empty.
const DefaultRescueError = "lease expired (worker lost)"

// JobPruneParams says which final jobs to delete: those whose finalized_at is
// before the cutoff for their state. A zero cutoff prunes none of that state.
type JobPruneParams struct {
	CompletedBefore time.Time
	CancelledBefore time.Time
	DiscardedBefore time.Time
	// Limit is the most jobs to delete in one statement; at least 1.
	Limit int
}

// LeaderElectParams asks for (or renews) leadership of Name.
type LeaderElectParams struct {
	// Name is what is led, such as "maintenance".
	Name string
	// LeaderID is the candidate's unique id.
	LeaderID string
	// TTL is how long leadership lasts without renewal, from the database's now().
	TTL time.Duration
}

// Notification is a message received on a channel.
type Notification struct {
	Channel string
	Payload string
}

// Listener receives notifications on a dedicated connection. One goroutine waits
// at a time; Close waits for a WaitForNotification in progress to return, so
// cancel the wait's context before closing.
type Listener interface {
	// WaitForNotification blocks until a notification arrives or ctx ends. After
	// ctx ends the listener can wait again; after any other error it is broken
	// and should be closed and replaced.
	WaitForNotification(ctx context.Context) (*Notification, error)
	// Close stops listening and closes the connection. It is safe to call twice.
	Close(ctx context.Context) error
}

// ReadyCompacter is an Executor whose claims walk a ready list kept apart from
// the job table, which the maintenance leader compacts now and then (the
// PostgreSQL driver: docs/design/storage.md in weir's repository). Executors without
// one need no compaction.
type ReadyCompacter interface {
	// ReadyCompact empties each segment of the ready list whose rows are
	// mostly gone, moving the rest to another segment first. A segment another
	// transaction holds locked is left for a later call.
	ReadyCompact(ctx context.Context, params *ReadyCompactParams) (ReadyCompactResult, error)
}

// ReadyCompactParams say what ReadyCompact does besides its usual compaction.
type ReadyCompactParams struct {
	// Repair adds a row for each available job that has none.
	Repair bool
	// Every compacts every segment, whatever its statistics say, the one
	// being written to as well: for tests, and for an operator who wants the
	// list small at once.
	Every bool
}

// ReadyCompactResult says what a ReadyCompact call did.
type ReadyCompactResult struct {
	// Compacted counts the segments emptied.
	Compacted int
	// Moved counts the rows of available jobs moved out of them.
	Moved int
	// Busy counts the segments due for compaction that another transaction
	// held locked.
	Busy int
	// BusyTries is, of the segments found locked, the most compactions in a
	// row, this one included, that found the same segment locked without
	// emptying it in between: 1 for a segment locked once, more for one that
	// stays locked. Zero when Busy is.
	BusyTries int
	// Crowded counts the segments due by their statistics that held more
	// live rows than the statistics said, left as they were.
	Crowded int
	// Repaired counts the rows added for available jobs that had none.
	Repaired int
	// Mode is the list's mode after the call: "off" (claims walk the job
	// table's index and inserts write no rows), "writing" (being turned
	// on) or "on"; ModeChanged says the call turned it on or off.
	Mode        string
	ModeChanged bool
}
