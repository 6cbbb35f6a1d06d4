package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weirq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestRun runs the example on a schema of its own and scrapes it until the
// first attempts are counted.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, options{url: dbtest.URL(), schema: dbtest.Schema(t), addr: "127.0.0.1:0",
			ready: func(addr string) { addrs <- addr }})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for the server")
	}

	deadline := time.Now().Add(20 * time.Second)
	for {
		body := scrape(t, "http://"+addr+"/metrics")
		if strings.Contains(body, "\nweir_attempts_total{") && strings.Contains(body, "\nweir_jobs_inserted_total{") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempts counted; scrape:\n%s", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
