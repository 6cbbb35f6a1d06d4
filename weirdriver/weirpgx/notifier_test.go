package weirpgx_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirq/weir/internal/dbtest"
	"github.com/weirq/weir/weirdriver/weirpgx"
)

// TestNotifierHonoursContext: an insert on the pool waits for the notification
// that carries its queues, but no longer than its context. Here one caller's
// notification is held at the pool (a hook keeps its connection until released);
// a second caller, waiting behind it, returns as soon as its context is
// cancelled, while the first is still held. The first caller's send runs under
// its own context: cancelling it ends the send, which is counted and logged.
// (The notifier used to wait on a condition variable and send under a
// background context with a fixed timeout, so the second caller waited for both
// sends, about 10 s, after its context ended.)
func TestNotifierHonoursContext(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	entered := make(chan struct{}, 1)
	pool := dbtest.Pool(t, func(c *pgxpool.Config) {
		c.PrepareConn = func(ctx context.Context, _ *pgx.Conn) (bool, error) {
			if !armed.Load() {
				return true, nil
			}
			entered <- struct{}{}
			<-ctx.Done() // held until the acquiring caller's context ends
			return false, ctx.Err()
		}
	})
	logs := &recordingHandler{}
	d, err := weirpgx.New(pool, &weirpgx.Config{Schema: dbtest.Schema(t), Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	exec := d.Executor()
	armed.Store(true)

	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	doneA := make(chan error, 1)
	go func() { doneA <- exec.NotifyInsert(ctxA, []string{"a"}) }()
	<-entered // A is sending, held at the pool

	ctxB, cancelB := context.WithCancel(t.Context())
	doneB := make(chan error, 1)
	go func() { doneB <- exec.NotifyInsert(ctxB, []string{"b"}) }()
	cancelB()
	if err := <-doneB; err != nil {
		t.Errorf("B: %v", err)
	}
	select {
	case <-doneA:
		t.Fatal("A returned before its send was released: B waited for A's send")
	default:
	}

	cancelA()
	if err := <-doneA; err != nil {
		t.Errorf("A: the insert's notification is not its error, got %v", err)
	}
	if got := d.NotificationsFailed(); got != 1 {
		t.Errorf("NotificationsFailed = %d, want 1", got)
	}
	if got := logs.count(slog.LevelWarn); got != 1 {
		t.Errorf("%d warnings logged, want 1", got)
	}

	// B's queue was left gathered: the next send carries it, and succeeds.
	armed.Store(false)
	if err := exec.NotifyInsert(t.Context(), []string{"c"}); err != nil {
		t.Fatal(err)
	}
	if got := d.NotificationsFailed(); got != 1 {
		t.Errorf("NotificationsFailed = %d after a good send, want 1", got)
	}
}

// recordingHandler is a slog handler that counts records by level.
type recordingHandler struct {
	mu     sync.Mutex
	levels []slog.Level
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.levels = append(h.levels, r.Level)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordingHandler) count(level slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.levels {
		if l == level {
			n++
		}
	}
	return n
}
