package weir

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

type greetArgs struct {
	Name string `json:"name"`
}

func (greetArgs) Kind() string { return "greet" }

type ptrArgs struct{}

func (*ptrArgs) Kind() string { return "ptr" }

func TestAddWorkerDecodesArgs(t *testing.T) {
	t.Parallel()
	workers := NewWorkers()
	var got string
	AddWorker(workers, WorkFunc(func(ctx context.Context, job *Job[greetArgs]) error {
		got = job.Args.Name + "@" + job.Kind
		return nil
	}))
	entry := workers.byKind["greet"]
	if entry == nil {
		t.Fatal("no worker registered for greet")
	}
	row := &JobRow{Kind: "greet", Args: json.RawMessage(`{"name":"ada"}`)}
	if err := entry.prepare(row)(context.Background()); err != nil || got != "ada@greet" {
		t.Fatalf("work: %v, got %q", err, got)
	}
	if err := entry.prepare(&JobRow{Kind: "greet", Args: json.RawMessage(`[1]`)})(context.Background()); err == nil {
		t.Fatal("args that do not decode were accepted")
	}
}

func TestAddWorkerSafelyRejects(t *testing.T) {
	t.Parallel()
	workers := NewWorkers()
	w := WorkFunc(func(context.Context, *Job[greetArgs]) error { return nil })
	if err := AddWorkerSafely(workers, w); err != nil {
		t.Fatal(err)
	}
	if err := AddWorkerSafely(workers, w); !isInvalid(err, "Kind") {
		t.Fatalf("second worker for a kind: %v", err)
	}
	if err := AddWorkerSafely(workers, WorkFunc(func(context.Context, *Job[*ptrArgs]) error { return nil })); err != nil {
		t.Fatalf("pointer args type: %v", err)
	}
	if err := AddWorkerSafely(workers, WorkFunc(func(context.Context, *Job[RawArgs]) error { return nil })); !isInvalid(err, "Kind") {
		t.Fatalf("args type with an empty kind: %v", err)
	}
	if err := AddWorkerSafely[greetArgs](workers, nil); !isInvalid(err, "worker") {
		t.Fatalf("nil worker: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("AddWorker did not panic on a duplicate kind")
		}
	}()
	AddWorker(workers, w)
}

// isInvalid reports whether err is an *InvalidError about field.
func isInvalid(err error, field string) bool {
	e, ok := errors.AsType[*InvalidError](err)
	return ok && e.Field == field && errors.Is(err, ErrInvalid)
}
