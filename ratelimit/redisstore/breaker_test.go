package redisstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOOMAnswerEndsARunOfFailures: failures open the breaker only while
// consecutive, and an OOM answer is Redis answering. A flood that keeps
// Redis full is answered OOM for as long as it lasts; round trips that
// time out now and then among those answers, as on a loaded machine,
// must not add up to an open breaker.
func TestOOMAnswerEndsARunOfFailures(t *testing.T) {
	oom := fmt.Errorf("running decision script: %w", oomReply(t))
	if !isOOMReply(oom) {
		t.Fatalf("got %v, want an OOM reply", oom)
	}
	var b breaker
	b.init()
	for i := range 10 * breakerFailures {
		b.failed(context.DeadlineExceeded, false)
		b.failed(oom, false)
		if b.open.Load() {
			t.Fatalf("after %d timeouts, each followed by an OOM answer: breaker open, want closed", i+1)
		}
	}
	for range breakerFailures {
		b.failed(context.DeadlineExceeded, false)
	}
	if !b.open.Load() {
		t.Errorf("after %d consecutive timeouts: breaker closed, want open", breakerFailures)
	}
}

// oomReply returns the error of a write that a full Redis refuses.
func oomReply(t *testing.T) error {
	t.Helper()
	srv := redistest.Start(t, "--maxmemory", "1", "--maxmemory-policy", "noeviction")
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Do(context.Background(), c.B().Set().Key("k").Value("v").Build()).Error()
	if err == nil {
		t.Fatal("SET on a Redis with maxmemory 1: got nil, want an OOM reply")
	}
	return err
}
