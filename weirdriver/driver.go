// Package weirdriver defines the interface between weir and a database. Each database
// has a driver package (weirpgx for PostgreSQL) that keeps its SQL to itself; all
// drivers pass the same conformance suite.
package weirdriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirq/weir/weirtype"
)

// ErrNotFound is returned when a job does not exist.
var ErrNotFound = errors.New("not found")

// ErrPeriodicDeclared is returned when an operator deletes a schedule that the
// leader declares: it would register it again.
var ErrPeriodicDeclared = errors.New("the leader declares this schedule; remove it from the config first, or pause it")

// Driver is a database that weir can keep jobs in.
type Driver interface {
	// Name names the database ("postgres", "sqlite").
	Name() string
	// Schema is the schema that holds weir's tables.
	Schema() string
	// Executor runs each call on the driver's own connections.
	Executor() Executor
	// UnwrapTx inserts jobs inside the caller's open transaction, which commits or
	// rolls them back with the caller's own writes. Each driver documents which
	// transaction types it takes.
	UnwrapTx(tx any) (Inserter, error)
	// Migrations lists every migration the driver knows, oldest first.
	Migrations() []Migration
	// MigrationBegin starts a migration: a transaction holding the migration lock
	// (see MigrationTx). It waits while another migrator of the schema holds it.
	MigrationBegin(ctx context.Context) (MigrationTx, error)
	// MigrationsApplied returns the migrations applied so far, in version order,
	// including any this driver does not know.
	MigrationsApplied(ctx context.Context) ([]AppliedMigration, error)

	// Listen opens a listener on its own connection for the given channels.
	Listen(ctx context.Context, channels ...string) (Listener, error)
	// InsertChannel carries the queue name of jobs that became available.
	InsertChannel() string
	// ControlChannel carries commands to clients, such as "cancel <id>".
	ControlChannel() string
}

// PrereleaseChain is implemented by a driver whose schema was built, before
// weir's first release, by a chain of migrations that its baseline (migration
// 1) replaces: PrereleaseMigrations names them in version order. weirmigrate
// records a database migrated by the whole chain as at the baseline, which
// produces the same schema, and refuses one migrated by part of it.
type PrereleaseChain interface {
	PrereleaseMigrations() []string
}

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
	// Compatible marks a migration that code which does not know it may run
	// against: it only adds what older code ignores. The up file declares it with
	// the header line "-- weir:compatible", and the migrator records it, so that
	// an older weir can read it from the database.
	Compatible bool
	// DropsData names the tables whose rows, written by users (jobs, periodic
	// schedules, queue settings), the migration's revert drops. The down file
	// declares them with a header line "-- weir:drops-data TABLE...", and the
	// migrator refuses the revert, unless forced, while any of them has rows.
	DropsData []string
}

// AppliedMigration is a migration recorded as applied.
type AppliedMigration struct {
	Version   int
	Name      string
	AppliedAt time.Time
	// Compatible is the migration's Compatible mark as recorded when it was
	// applied; false for migrations recorded before the table had the column.
	Compatible bool
}

// MigrationTx is a migration in progress. weirmigrate runs the migration on it:
// reads what is applied, plans, and runs and records each migration; each
// method is one piece of SQL or one step of the transaction. A driver
// guarantees:
//
//   - Every method runs in the one transaction that MigrationBegin started, so
//     that a migration that ends in Rollback leaves the database as it was:
//     schema, migration table and migration bodies included.
//   - The transaction holds, from MigrationBegin to its end, a lock that
//     serialises the migrators of the schema, in this process and in others
//     (PostgreSQL: an advisory lock keyed by the schema; SQLite: the file's
//     write lock, taken by BEGIN IMMEDIATE on the write connection).
//   - Each statement sees what a migrator that held the lock before committed
//     (PostgreSQL: read committed whatever the session's default).
//   - Nothing is created before Prepare, so a migration with nothing to do
//     leaves nothing behind.
//
// A MigrationTx is not for concurrent use.
type MigrationTx interface {
	// Applied reads the applied migrations in version order; none when the
	// migration table does not exist. Compatible reads false when the table
	// lacks the compatible column.
	Applied(ctx context.Context) ([]AppliedMigration, error)
	// CountRows locks table, one of weir's in the schema, against writes until
	// the transaction ends and counts its rows; 0 when the table does not exist.
	// The lock makes the count hold until a revert that follows drops the
	// table. table is an unquoted SQL name (a Migration.DropsData entry).
	CountRows(ctx context.Context, table string) (int64, error)
	// Prepare creates the schema (where the database has schemas) and the
	// migration table when they do not exist, and makes the schema the one the
	// migration bodies' unqualified names resolve in. It comes before Exec and
	// the records.
	Prepare(ctx context.Context) error
	// Exec runs a migration's up or down body, which may hold several
	// statements.
	Exec(ctx context.Context, body string) error
	// HasCompatibleColumn reports whether the migration table has the
	// compatible column, which a table made by a weir before 0.1.0 may lack.
	HasCompatibleColumn(ctx context.Context) (bool, error)
	// Record records that migration version, name was applied, at the
	// transaction's time, in a migration table without the compatible column.
	Record(ctx context.Context, version int, name string) error
	// RecordCompatible records it with its compatible mark, in a migration table
	// with the column.
	RecordCompatible(ctx context.Context, version int, name string, compatible bool) error
	// Unrecord deletes the record of migration version, which was reverted.
	Unrecord(ctx context.Context, version int) error
	// Commit commits the migration and releases the lock.
	Commit(ctx context.Context) error
	// Rollback discards the migration and releases the lock; after Commit it
	// does nothing.
	Rollback(ctx context.Context) error
}

// Inserter is all that runs inside a caller's transaction (Driver.UnwrapTx):
// inserting jobs, listing them as the transaction sees them (its own inserts
// included; weirtest reads through it), and completing a running job under
// its lease (weir.JobCompleteTx). Executor has it too.
type Inserter interface {
	// JobInsert inserts jobs with one statement per call and returns them in order.
	// A job whose unique key conflicts with an existing job's is not inserted; the
	// existing job is returned with Duplicate set.
	JobInsert(ctx context.Context, params []*JobInsertParams) ([]JobInsertResult, error)
	// JobInsertBulk inserts jobs without unique keys in bulk (COPY where the
	// database has it) and returns them in order.
	JobInsertBulk(ctx context.Context, params []*JobInsertParams) ([]*weirtype.JobRow, error)
	// NotifyInsert wakes workers of the given queues when the current transaction
	// commits; outside a transaction, soon (a driver may coalesce the
	// notifications of concurrent callers).
	NotifyInsert(ctx context.Context, queues []string) error
	// BeginInsert starts a transaction, or a savepoint inside one, so that the
	// inserts of one batch apply whole or not at all. On an Executor it is Begin.
	BeginInsert(ctx context.Context) (InserterTx, error)
	// JobComplete completes job p.ID in the current transaction, fenced as
	// JobFinalize's completion is: only while the job is running under
	// p.LeaseToken, a requested cancel making it cancelled instead. It writes
	// p.Output and p.Progress as JobFinalize does a completion's. It reports
	// whether it applied (false: stale, nothing changed). The row stays locked
	// until the transaction ends, so no rescue or claim can take the job
	// meanwhile.
	JobComplete(ctx context.Context, p *JobCompleteParams) (bool, error)
	// JobList lists jobs in id order (see JobListParams).
	JobList(ctx context.Context, params *JobListParams) ([]*weirtype.JobRow, error)
}

// JobCompleteParams is one completion in a caller's transaction
// (Inserter.JobComplete).
type JobCompleteParams struct {
	ID         int64
	LeaseToken int64
	// Output and Progress are written as JobFinalizeParams' are.
	Output   json.RawMessage
	Progress json.RawMessage
}

// InserterTx is an Inserter inside a transaction (or savepoint) it owns.
type InserterTx interface {
	Inserter
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Executor runs weir's statements, on a pool or inside a transaction.
type Executor interface {
	Inserter

	JobGet(ctx context.Context, id int64) (*weirtype.JobRow, error)
	// JobCancel makes a job that is not running cancelled at once, and marks a running
	// job's cancel request. It returns the job afterwards.
	JobCancel(ctx context.Context, id int64) (*weirtype.JobRow, error)
	// JobRetry makes a job that is not running available now.
	JobRetry(ctx context.Context, id int64) (*weirtype.JobRow, error)
	// JobUpdate replaces the metadata and tags of a job that is not running
	// (nil: left as they are) and returns the job afterwards.
	JobUpdate(ctx context.Context, id int64, params *JobUpdateParams) (*weirtype.JobRow, error)
	// JobDelete deletes a job that is not running and returns it.
	JobDelete(ctx context.Context, id int64) (*weirtype.JobRow, error)
	// QueueList counts jobs by queue and state, and lists paused queues even when
	// they hold no jobs.
	QueueList(ctx context.Context) ([]*weirtype.QueueStats, error)
	// QueueListEstimated lists what QueueList does for a page that polls it
	// on a large table: the counts of the states that are not final
	// (scheduled, available, running, retryable) exact, from their partial
	// indexes, and those of the final states (completed, cancelled,
	// discarded) estimated where an exact count would read the whole table,
	// each such state marked in weirtype.QueueStats.Estimated. A driver that counts
	// every state cheaply may answer exactly, marking nothing. A queue whose
	// only jobs are a few final ones may be missing from an estimate.
	QueueListEstimated(ctx context.Context) ([]*weirtype.QueueStats, error)
	// JobThroughput counts the jobs finalized from params.Since on, by state,
	// in buckets of params.Width starting at Since, through the index on
	// finalized_at: the rows finalized in that time and no others.
	JobThroughput(ctx context.Context, params *JobThroughputParams) (*weirtype.Throughput, error)
	// QueuePause pauses a queue: no client claims from it until it is resumed;
	// running jobs finish. Pausing a paused queue changes nothing.
	QueuePause(ctx context.Context, name string) error
	// QueueResume resumes a paused queue and wakes its workers. Resuming a queue
	// that is not paused changes nothing.
	QueueResume(ctx context.Context, name string) error
	// QueueSetGlobalLimit sets the most jobs of a queue that may run at once
	// across every client (1 to MaxGlobalLimit), or removes the limit (0). A
	// lower limit than the jobs running stops no job: claims wait until fewer run.
	QueueSetGlobalLimit(ctx context.Context, name string, limit int) error
	// QueueSetRateLimit sets the most jobs of a queue started per period
	// across every client (limit 1 to MaxRateLimit, period CheckRateLimit's
	// range), spread evenly, or removes the limit (limit 0, period ignored).
	QueueSetRateLimit(ctx context.Context, name string, limit int, period time.Duration) error
	// QueueSetKeyLimit sets a queue's limits per key (CheckKeyLimit), a
	// job's key being the value of the field params.Key names (ParseKey) as
	// text: the most jobs with the same key running at once across every
	// client, and the most started per period, spread evenly. The zero
	// KeyLimitParams removes them.
	QueueSetKeyLimit(ctx context.Context, name string, params KeyLimitParams) error

	// The worker runtime's statements. Every write about a running job is fenced:
	// it applies only while the job is running under the given lease token, and a
	// write that matches nothing (stale) changes nothing.

	// JobClaim leases up to Max due available jobs of a queue, in priority, then
	// scheduled time, then id order, skipping jobs that other claimers hold locked.
	// Each claimed job gets a lease token greater than any it had before. A
	// queue with a global limit (QueueSetGlobalLimit) or a rate limit
	// (QueueSetRateLimit) is claimed from one claim at a time: a claim leases
	// at most the global limit less the live shares (QueueShare) and the
	// running jobs of the clients without one, counted after every earlier
	// such claim of the queue ended, and no more than the rate limit admits;
	// a claim by a client holding a live share is not counted against the
	// global limit; with a limit per key (QueueSetKeyLimit), at most that
	// limit less the running jobs of the key, for each key, passing over the
	// jobs of buckets of keys a client holds (KeyShare); a claim naming the
	// buckets the client holds (params.KeyBuckets) takes their jobs without
	// the lock or the count, at most KeyDepth of a key, and returns each
	// job's key (ClaimLimit.Owned, Keys). The ClaimLimit says whether a limit
	// cut this claim short, so that the queue may hold more due jobs than
	// were returned.
	JobClaim(ctx context.Context, params *JobClaimParams) ([]*weirtype.JobRow, ClaimLimit, error)
	// QueueShare renews, takes or gives up (Want 0) the client's share of a
	// queue's global limit, in one transaction under the lock the queue's
	// limited claims take: it deletes the shares whose lease ran out, and
	// writes the client's as the most of its fair part (FairShare over the
	// live shares' wants and its own) that the limit less the other shares
	// and the running jobs of clients without one leaves, but never less than
	// params.Keep, leased for params.Lease. A client that holds a share
	// claims the queue's jobs without the global limit's count and runs at
	// most QueueShare.Fair of its handlers at once; a queue without a global
	// limit keeps no share (Limit 0).
	QueueShare(ctx context.Context, params *QueueShareParams) (QueueShare, error)
	// KeyShare renews, takes or gives up (GiveUp) the client's buckets of a
	// queue's keys, in one transaction under the lock the queue's limited
	// claims take: it deletes the buckets whose lease ran out and those the
	// client releases, renews the client's others for params.Lease, and,
	// while it holds fewer than its even part of KeyBuckets among the
	// clients that ask, takes free buckets none of whose jobs runs. A claim
	// naming held buckets (JobClaimParams.KeyBuckets) is not counted against
	// the limit per key; counted claims pass over held buckets' jobs. A
	// driver that does not share keys, or a queue whose keys cannot be held,
	// answers Limit 0 and holds nothing.
	KeyShare(ctx context.Context, params *KeyShareParams) (KeyShare, error)
	// JobClaimID leases job params.ID if it is scheduled, available or retryable,
	// whatever its due time, whether its queue is paused and its global limit, and returns it
	// running. A job that is running or final is returned unchanged, with false;
	// a job that does not exist is ErrNotFound. It runs one chosen job: weirtest's
	// Worker and inline clients use it.
	JobClaimID(ctx context.Context, params *JobClaimIDParams) (*weirtype.JobRow, bool, error)
	// JobFinalize writes a batch of outcomes in one statement and reports, per
	// param in order, whether it applied (false: stale, nothing changed).
	JobFinalize(ctx context.Context, params []*JobFinalizeParams) ([]bool, error)
	// JobStatesUnder returns, per job in order, the state of job ids[i] if its
	// lease token is tokens[i], and "" if not (or if there is no such job): how
	// the client learns whether a handler's transaction that completed its job
	// (JobComplete) committed.
	JobStatesUnder(ctx context.Context, ids, tokens []int64) ([]weirtype.JobState, error)
	// JobRenew extends a batch of leases in one statement.
	JobRenew(ctx context.Context, params *JobRenewParams) (*JobRenewResult, error)
	// JobRescue takes back running jobs whose lease expired by the database clock
	// and returns them as they are afterwards.
	JobRescue(ctx context.Context, params *JobRescueParams) ([]*weirtype.JobRow, error)
	// JobNextExpiry reports how long until the earliest lease of a running job
	// expires by the database clock (zero or less when one already has), and
	// false when no job runs: maintenance plans its next rescue by it.
	JobNextExpiry(ctx context.Context) (time.Duration, bool, error)
	// JobSchedule makes up to limit due scheduled and retryable jobs available and
	// returns how many it changed.
	JobSchedule(ctx context.Context, limit int) (int, error)
	// JobPrune deletes old final jobs and returns how many it deleted.
	JobPrune(ctx context.Context, params *JobPruneParams) (int, error)

	// LeaderElect takes leadership of params.Name when nobody holds it or the
	// holder's term expired, or renews it for its holder. It reports whether
	// params.LeaderID leads afterwards.
	LeaderElect(ctx context.Context, params *LeaderElectParams) (bool, error)
	// LeaderResign gives up leadership of name if leaderID holds it.
	LeaderResign(ctx context.Context, name, leaderID string) error
	// LeaderGet returns the unexpired term of name: who holds it, since when
	// and until when. It returns ErrNotFound when nobody holds an unexpired
	// term.
	LeaderGet(ctx context.Context, name string) (*weirtype.LeaderRow, error)
	// LeaderTermLeft reports how long the unexpired term of name has left by
	// the database clock, and false when there is none: a client that lost an
	// election tries again as that term ends.
	LeaderTermLeft(ctx context.Context, name string) (time.Duration, bool, error)

	// PeriodicRegister records the schedules the leader, declaredBy, declares:
	// a new one with its NextRunAt, a known one with its spec, time zone and
	// (when either changed) NextRunAt replaced; each is no longer orphaned.
	// Every other schedule is marked orphaned (orphaned_at kept if set).
	PeriodicRegister(ctx context.Context, declaredBy string, params []*PeriodicRegisterParams) error
	// PeriodicList returns every schedule, by name.
	PeriodicList(ctx context.Context) ([]*weirtype.PeriodicRow, error)
	// PeriodicLock returns schedule name locked until the transaction ends, and
	// the database's clock, or ErrNotFound. Call it inside a transaction.
	PeriodicLock(ctx context.Context, name string) (*weirtype.PeriodicRow, time.Time, error)
	// PeriodicAdvance moves a schedule past a fire, if its next_run_at is still
	// params.From; it reports whether it did.
	PeriodicAdvance(ctx context.Context, params *PeriodicAdvanceParams) (bool, error)
	// PeriodicPause pauses (paused) or resumes schedule name and returns it.
	PeriodicPause(ctx context.Context, name string, paused bool) (*weirtype.PeriodicRow, error)
	// PeriodicTrigger makes schedule name due now, so that the leader fires it
	// at once, with its next slot still to come, and returns it.
	PeriodicTrigger(ctx context.Context, name string) (*weirtype.PeriodicRow, error)
	// PeriodicDelete deletes schedule name if it is orphaned and returns it as
	// it was; a schedule the leader declares is refused with ErrPeriodicDeclared.
	PeriodicDelete(ctx context.Context, name string) (*weirtype.PeriodicRow, error)

	// ClientRegister writes client p.ID's row in the client registry, or
	// replaces it: every field as given, heartbeat_at now and started_at
	// p.StartedAt (now when zero), by the database clock. It returns the
	// row's started_at.
	ClientRegister(ctx context.Context, p *ClientRegisterParams) (time.Time, error)
	// ClientDelete deletes client id's row; a row that is not there is no
	// error.
	ClientDelete(ctx context.Context, id string) error
	// ClientList returns every registered client by id, each with the count
	// of running jobs whose attempted_by is its id (HeldLeases).
	ClientList(ctx context.Context) ([]*weirtype.ClientRow, error)
	// ClientPrune deletes up to p.Limit rows whose heartbeat is older than
	// p.StaleAfter, oldest first, skipping rows a refresh holds locked, and
	// returns how many it deleted.
	ClientPrune(ctx context.Context, p *ClientPruneParams) (int, error)

	// Begin starts a transaction, or a savepoint inside one.
	Begin(ctx context.Context) (ExecutorTx, error)
}

// ExecutorTx is an Executor inside a transaction it owns.
type ExecutorTx interface {
	Executor
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// JobInsertParams is one job to insert. Validation happens before a driver sees it.
type JobInsertParams struct {
	Kind        string
	Queue       string
	Args        json.RawMessage
	Priority    int
	MaxAttempts int
	// ScheduledAt is when the job becomes due; zero means now (database clock).
	ScheduledAt time.Time
	Tags        []string
	Metadata    json.RawMessage
	// UniqueKey, when set, must be unique among jobs whose state is in UniqueStates.
	// When UniqueByArgs is set, UniqueKey is only the prefix computed from the kind,
	// queue and period: the driver derives the key as SHA-256 of UniqueKey, "\x00args="
	// and its canonical text of Args (PostgreSQL: the jsonb text, as weir_enqueue
	// does; a driver without one may use CanonicalArgs).
	UniqueKey    []byte
	UniqueStates []weirtype.JobState
	UniqueByArgs bool
	// UniqueArgsKeys, when set with UniqueByArgs, limits the key to these
	// top-level keys of Args: the key covers the object made of those of them
	// that Args holds, in place of all of Args.
	UniqueArgsKeys []string
	// CanonicalArgs is what the key covers (Args, or the object of its
	// UniqueArgsKeys) with object keys sorted and no spaces, set with
	// UniqueByArgs.
	CanonicalArgs []byte
	// UniqueOnConflict says what the insert does to the job that holds its
	// unique key when that job is pending (scheduled, available or retryable);
	// a running or final holder is never changed. A call holds at most one job
	// per unique key (the client folds repeats first).
	UniqueOnConflict UniqueOnConflict
}

// UniqueOnConflict is what a unique insert does to a pending job holding its key.
type UniqueOnConflict uint8

// The conflict modes, as weir.UniqueOpts.OnConflict names them.
const (
	// UniqueOnConflictSkip leaves the holder as it is.
	UniqueOnConflictSkip UniqueOnConflict = iota
	// UniqueOnConflictReplace gives the holder the insert's args, metadata, tags,
	// priority and max attempts; its queue, scheduled time and state stay.
	UniqueOnConflictReplace
	// UniqueOnConflictDebounce replaces as UniqueOnConflictReplace does and also
	// moves the holder's scheduled time to the insert's (now when it has none):
	// it becomes available when that time is not after now, and otherwise
	// scheduled, or stays retryable when it was.
	UniqueOnConflictDebounce
)

// JobInsertResult is an inserted job, or the existing job a unique insert collided with.
type JobInsertResult struct {
	Job *weirtype.JobRow
	// Duplicate is set when the job was not inserted because Job holds its
	// unique key.
	Duplicate bool
	// Replaced is set (with Duplicate) when the insert's UniqueOnConflict changed
	// Job; Job is the row afterwards.
	Replaced bool
}

// JobUpdateParams are the fields JobUpdate replaces; nil leaves a field as it
// is. Metadata is a JSON object the caller checked.
type JobUpdateParams struct {
	Metadata json.RawMessage
	Tags     []string
}

// JobListParams filters and pages a job listing. Jobs come in id order; the next page
// starts after the last id seen.
type JobListParams struct {
	States        []weirtype.JobState
	Queues        []string
	Kinds         []string
	Tags          []string  // jobs that carry every one of them
	CreatedAfter  time.Time // inclusive; zero means no bound
	CreatedBefore time.Time // exclusive; zero means no bound
	// Search, when set, keeps the jobs whose kind or args (the JSON text the
	// database keeps) hold it as a literal substring, without regard to case:
	// its LIKE wildcards and escape character are escaped. The caller bounds
	// its length.
	Search string
	// AfterID and Descending page by id: ascending lists ids > AfterID, descending
	// lists ids < AfterID (when AfterID > 0).
	AfterID    int64
	Descending bool
	// StopID, when positive, ends the walk there: ascending lists ids ≤
	// StopID, descending ids ≥ StopID. It bounds what a page whose filters
	// match few jobs reads.
	StopID int64
	Limit  int
}

// KeyLimitParams are a queue's limits per key (Executor.QueueSetKeyLimit).
type KeyLimitParams struct {
	// Key names the field whose value is a job's key (ParseKey).
	Key string
	// Limit is the most running jobs per key, 0 for none.
	Limit int
	// Rate jobs per RatePeriod is the most started per key, spread evenly,
	// 0 for none.
	Rate       int
	RatePeriod time.Duration
}

// JobThroughputParams asks for the jobs finalized from Since on, by bucket of
// Width (CheckThroughput).
type JobThroughputParams struct {
	Since time.Time
	Width time.Duration
}

// Error codes a driver wraps into its errors, so that callers can tell what
// went wrong without knowing the database.
var (
	// ErrJobRunning is returned when an operation needs a job that is not running.
	ErrJobRunning = errors.New("job is running")
	// ErrJobFinal is returned when an operation needs a job that is not final.
	ErrJobFinal = errors.New("job is already final")
	// ErrUniqueConflict is returned when a change would give two jobs the same unique key.
	ErrUniqueConflict = errors.New("another job has the same unique key")
)

// JobFinalError is the error for an operation that needs a job that is not
// final: State is the job's final state. errors.Is(err, ErrJobFinal) holds.
type JobFinalError struct {
	State weirtype.JobState
}

func (e *JobFinalError) Error() string { return fmt.Sprintf("%s (%s)", ErrJobFinal, e.State) }

// Is reports whether target is ErrJobFinal.
func (e *JobFinalError) Is(target error) bool { return target == ErrJobFinal }

// LikePattern is a LIKE pattern, with ESCAPE '\', that matches any text
// holding s: its wildcards (% and _) and the escape character are escaped.
func LikePattern(s string) string {
	return "%" + likeEscaper.Replace(s) + "%"
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// StateBit is the bit for state s in a unique-states bit mask.
func StateBit(s weirtype.JobState) uint16 {
	for i, known := range weirtype.JobStates() {
		if s == known {
			return 1 << i
		}
	}
	return 0
}

// StatesMask packs states into a bit mask.
func StatesMask(states []weirtype.JobState) uint16 {
	var mask uint16
	for _, s := range states {
		mask |= StateBit(s)
	}
	return mask
}

// MaskStates unpacks a bit mask of states.
func MaskStates(mask uint16) []weirtype.JobState {
	var states []weirtype.JobState
	for _, s := range weirtype.JobStates() {
		if mask&StateBit(s) != 0 {
			states = append(states, s)
		}
	}
	return states
}

// ErrSchemaMissing is wrapped into errors that mean weir's tables, or some of their
// columns or functions, do not exist: the schema is not migrated (far enough).
var ErrSchemaMissing = errors.New("weir's schema is missing or not migrated")
