// Package weirdrivertest is the conformance suite that every weir driver passes,
// weirpgx and weirsqlite included, so that a third-party driver can prove itself.
// A driver's own test calls Run with a function that returns a driver on a fresh,
// migrated schema; the checks are grouped by area in this package's files (insert,
// operator, migration, claim, finalize, lease, maintenance, listen, client).
//
// Expiry is always the database's clock, so checks that need an expired lease
// claim with a 1 µs lease and poll rescue until it takes the job back, with a
// deadline, instead of sleeping.
package weirdrivertest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weirq/weir/weirdriver"
	"github.com/weirq/weir/weirtype"
)

// Setup returns a driver on a fresh schema with every migration applied. Each call
// must be independent of the others, so that subtests run in parallel.
type Setup func(t *testing.T) weirdriver.Driver

// Run runs the suite.
func Run(t *testing.T, setup Setup) {
	RunWith(t, setup, Options{})
}

// Options changes what Run checks.
type Options struct {
	// NoListen skips the checks that listen for notifications: the driver is
	// used where LISTEN does not work, as through a connection pooler in
	// transaction mode. The statements that send notifications still run in
	// the other checks.
	NoListen bool
	// NoKeyShares says that the driver holds no buckets of a queue's keys
	// (KeyShare answers Limit 0): every claim of a queue limited per key is
	// counted.
	NoKeyShares bool
}

// needsListen names the checks that listen for notifications.
var needsListen = map[string]bool{
	"InsertNotifies": true, "InsertNotifiesConcurrently": true, "RuntimeNotifies": true, "Listen": true,
}

// RunWith runs the suite with opts.
func RunWith(t *testing.T, setup Setup, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, d weirdriver.Driver)
	}{
		{"InsertReturnsJobsInOrder", testInsertReturnsJobsInOrder},
		{"InsertScheduledInFuture", testInsertScheduledInFuture},
		{"InsertUnique", testInsertUnique},
		{"InsertUniqueOnConflict", testInsertUniqueOnConflict},
		{"InsertUniqueArgsKeys", testInsertUniqueArgsKeys},
		{"InsertBulk", testInsertBulk},
		{"TxRollbackLeavesNothing", testTxRollbackLeavesNothing},
		{"InsertTxAllOrNothing", testInsertTxAllOrNothing},
		{"GetNotFound", testGetNotFound},
		{"ListFiltersAndPages", testListFiltersAndPages},
		{"ListSearch", testListSearch},
		{"Cancel", testCancel},
		{"Retry", testRetry},
		{"Delete", testDelete},
		{"Update", testUpdate},
		{"QueueList", testQueueList},
		{"QueueListOldestAvailable", testQueueListOldestAvailable},
		{"QueueListEstimated", testQueueListEstimated},
		{"JobThroughput", testJobThroughput},
		{"MigrationsApplied", testMigrationsApplied},
		{"MigrationTx", testMigrationTx},
		{"QueuePauseResume", testQueuePauseResume},
		{"GlobalLimit", testGlobalLimit},
		{"GlobalLimitConcurrent", testGlobalLimitConcurrent},
		{"GlobalLimitRejectsBadInput", testGlobalLimitRejectsBadInput},
		{"QueueShare", testQueueShare},
		{"KeyShare", func(t *testing.T, d weirdriver.Driver) { testKeyShare(t, d, opts) }},
		{"KeyShareMovedKey", func(t *testing.T, d weirdriver.Driver) { testKeyShareMovedKey(t, d, opts) }},
		{"KeyShareHiddenKey", func(t *testing.T, d weirdriver.Driver) { testKeyShareHiddenKey(t, d, opts) }},
		{"KeySharePart", func(t *testing.T, d weirdriver.Driver) { testKeySharePart(t, d, opts) }},
		{"RateLimit", testRateLimit},
		{"KeyLimit", testKeyLimit},
		{"KeyLimitConcurrent", testKeyLimitConcurrent},
		{"KeyRateLimit", testKeyRateLimit},
		{"KeyLimitManyKeys", testKeyLimitManyKeys},
		{"KeyLimitRejectsBadInput", testKeyLimitRejectsBadInput},
		{"PeriodicRegister", testPeriodicRegister},
		{"PeriodicFireAndOperate", testPeriodicFireAndOperate},
		{"ClientRegistry", testClientRegistry},
		{"ClientPrune", testClientPrune},
		{"ClientRejectsBadParams", testClientRejectsBadParams},

		// The worker runtime's statements (runtime.go).
		{"ClaimOrderAndMax", testClaimOrderAndMax},
		{"ClaimSetsLease", testClaimSetsLease},
		{"ClaimConcurrentNoOverlap", testClaimConcurrentNoOverlap},
		{"ClaimID", testClaimID},
		{"FinalizeOutcomes", testFinalizeOutcomes},
		{"FinalizeStaleChangesNothing", testFinalizeStaleChangesNothing},
		{"FinalizeCancelRequested", testFinalizeCancelRequested},
		{"FinalizeCompletionsBatch", testFinalizeCompletionsBatch},
		{"JobComplete", testJobComplete},
		{"InsertOneAsInBatch", testInsertOneAsInBatch},
		{"InsertNotifies", testInsertNotifies},
		{"InsertNotifiesConcurrently", testInsertNotifiesConcurrently},
		{"FinalizeRetryPastMaxAttempts", testFinalizeRetryPastMaxAttempts},
		{"RuntimeNotifies", testRuntimeNotifies},
		{"Renew", testRenew},
		{"RenewWritesProgress", testRenewWritesProgress},
		{"FinalizeOutputProgress", testFinalizeOutputProgress},
		{"JobCompleteOutputProgress", testJobCompleteOutputProgress},
		{"Rescue", testRescue},
		{"RescueKeepsPlace", testRescueKeepsPlace},
		{"NextExpiry", testNextExpiry},
		{"Schedule", testSchedule},
		{"Prune", testPrune},
		{"LeaderElection", testLeaderElection},
		{"LeaderElectionConcurrent", testLeaderElectionConcurrent},
		{"LeaderTermLeft", testLeaderTermLeft},
		{"Listen", testListen},
		{"RuntimeRejectsBadParams", testRuntimeRejectsBadParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if opts.NoListen && needsListen[tt.name] {
				t.Skip("listens for notifications; Options.NoListen says LISTEN does not work here")
			}
			t.Parallel()
			tt.fn(t, setup(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

const testClient = "client-1"

func getJob(t *testing.T, d weirdriver.Driver, id int64) *weirtype.JobRow {
	t.Helper()
	job, err := d.Executor().JobGet(ctx(t), id)
	if err != nil {
		t.Fatalf("get job %d: %v", id, err)
	}
	return job
}

func ids(jobs []*weirtype.JobRow) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// rowJSON renders a job for whole-row comparison. JSON rather than DeepEqual,
// because equal times may carry different *time.Location values.
func rowJSON(t *testing.T, job *weirtype.JobRow) string {
	t.Helper()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameRow fails unless job id is stored exactly as before.
func sameRow(t *testing.T, d weirdriver.Driver, what string, before *weirtype.JobRow) {
	t.Helper()
	if after := rowJSON(t, getJob(t, d, before.ID)); after != rowJSON(t, before) {
		t.Fatalf("%s changed job %d:\nbefore %s\nafter  %s", what, before.ID, rowJSON(t, before), after)
	}
}

// near reports whether got is within a minute of want; it compares the database
// clock with the test's, so it allows for skew.
func near(got, want time.Time) bool {
	d := got.Sub(want)
	return d > -time.Minute && d < time.Minute
}

func testRuntimeRejectsBadParams(t *testing.T, d weirdriver.Driver) {
	exec := d.Executor()
	job := claimOne(t, d, "bad", 3, time.Minute)
	good := weirdriver.JobClaimParams{Queue: "bad", Max: 1, ClientID: testClient, LeaseDuration: time.Minute}
	for name, mod := range map[string]func(*weirdriver.JobClaimParams){
		"max 0":      func(p *weirdriver.JobClaimParams) { p.Max = 0 },
		"no queue":   func(p *weirdriver.JobClaimParams) { p.Queue = "" },
		"no client":  func(p *weirdriver.JobClaimParams) { p.ClientID = "" },
		"zero lease": func(p *weirdriver.JobClaimParams) { p.LeaseDuration = 0 },
	} {
		p := good
		mod(&p)
		if _, _, err := exec.JobClaim(ctx(t), &p); err == nil {
			t.Errorf("claim with %s succeeded", name)
		}
	}
	ok := &weirdriver.JobFinalizeParams{ID: job.ID, LeaseToken: job.LeaseToken, Outcome: weirdriver.OutcomeCompleted}
	for name, batch := range map[string][]*weirdriver.JobFinalizeParams{
		"unknown outcome": {ok, {ID: job.ID + 1, LeaseToken: 1, Outcome: "done"}},
		"duplicate id":    {ok, ok},
	} {
		if _, err := exec.JobFinalize(ctx(t), batch); err == nil {
			t.Errorf("finalize with %s succeeded", name)
		}
	}
	sameRow(t, d, "rejected finalize", job)
	if _, err := exec.JobRenew(ctx(t), &weirdriver.JobRenewParams{IDs: []int64{job.ID}, LeaseDuration: time.Minute}); err == nil {
		t.Error("renew with more ids than tokens succeeded")
	}
	if _, err := exec.JobRenew(ctx(t), &weirdriver.JobRenewParams{IDs: []int64{job.ID}, LeaseTokens: []int64{job.LeaseToken},
		LeaseDuration: time.Minute, Progress: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}}); err == nil {
		t.Error("renew with more progress entries than ids succeeded")
	}
	sameRow(t, d, "rejected renew", job)
	if _, err := exec.JobRescue(ctx(t), &weirdriver.JobRescueParams{}); err == nil {
		t.Error("rescue with limit 0 succeeded")
	}
	if _, err := exec.JobSchedule(ctx(t), 0); err == nil {
		t.Error("schedule with limit 0 succeeded")
	}
	if _, err := exec.JobPrune(ctx(t), &weirdriver.JobPruneParams{CompletedBefore: time.Now()}); err == nil {
		t.Error("prune with limit 0 succeeded")
	}
	if _, err := exec.LeaderElect(ctx(t), &weirdriver.LeaderElectParams{Name: "x", LeaderID: "a"}); err == nil {
		t.Error("elect with a zero TTL succeeded")
	}
}
