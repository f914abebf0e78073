package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for one writer and one reader.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
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

// TestDemoAdminOff: `sluice demo -admin ""` turns the admin listener off,
// as its flag says, rather than falling back to 127.0.0.1:9091, which
// another process (a second demo, a running sluice) may hold.
func TestDemoAdminOff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- Demo(ctx, DemoOptions{Listen: "127.0.0.1:0", Admin: "", Out: &out, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "Ctrl-C stops the demo") {
		select {
		case err := <-done:
			t.Fatalf("Demo ended before printing its curl lines: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("Demo printed no curl lines within 10s:\n%s", out.String())
		}
	}
	if got := out.String(); strings.Contains(got, "/metrics") {
		t.Errorf("got admin curl lines with the admin listener off:\n%s", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Demo: got %v, want nil after ctx ends", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Demo did not return within 10s of ctx ending")
	}
}
