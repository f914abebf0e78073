package linewriter

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// sink records each write it receives.
type sink struct {
	mu     sync.Mutex
	writes []string
	wrote  chan struct{}
}

func newSink() *sink { return &sink{wrote: make(chan struct{}, 100)} }

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.writes = append(s.writes, string(p))
	s.mu.Unlock()
	s.wrote <- struct{}{}
	return len(p), nil
}

func (s *sink) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.writes...)
}

func TestLinesWaitUntilFlush(t *testing.T) {
	t.Parallel()
	s := newSink()
	b := New(s, time.Hour, 0)
	b.Write([]byte("a\n"))
	b.Write([]byte("b\n"))
	if got := s.all(); len(got) != 0 {
		t.Fatalf("before Flush: got writes %q, want none", got)
	}
	b.Flush()
	if got := s.all(); len(got) != 1 || got[0] != "a\nb\n" {
		t.Fatalf("after Flush: got %q, want one write of both lines", got)
	}
}

func TestFullBufferIsWritten(t *testing.T) {
	t.Parallel()
	s := newSink()
	b := New(s, time.Hour, 10)
	b.Write([]byte("12345\n"))
	b.Write([]byte("67890\n"))
	if got := s.all(); len(got) != 1 || got[0] != "12345\n67890\n" {
		t.Fatalf("got %q, want one write once 10 bytes waited", got)
	}
}

func TestDelayWritesWithoutFlush(t *testing.T) {
	t.Parallel()
	s := newSink()
	b := New(s, 10*time.Millisecond, 0)
	b.Write([]byte("late\n"))
	select {
	case <-s.wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting line was never written")
	}
	if got := s.all(); len(got) != 1 || got[0] != "late\n" {
		t.Fatalf("got %q, want the line", got)
	}
}

func TestZeroDelayAndCloseWriteAtOnce(t *testing.T) {
	t.Parallel()
	s := newSink()
	b := New(s, 0, 0)
	b.Write([]byte("now\n"))
	if got := s.all(); len(got) != 1 {
		t.Fatalf("delay 0: got %q, want the line written at once", got)
	}
	s2 := newSink()
	b2 := New(s2, time.Hour, 0)
	b2.Write([]byte("before close\n"))
	b2.Close()
	b2.Write([]byte("after close\n"))
	if got := s2.all(); len(got) != 2 || got[0] != "before close\n" || got[1] != "after close\n" {
		t.Fatalf("close: got %q, want the waiting line, then the later one at once", got)
	}
}

func TestConcurrentLinesStayWholeAndOrdered(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	var mu sync.Mutex
	b := New(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) }), time.Millisecond, 64)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				fmt.Fprintf(b, "g%d line %03d\n", g, i)
			}
		})
	}
	wg.Wait()
	b.Close()
	mu.Lock()
	defer mu.Unlock()
	last := map[byte]int{}
	lines := bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 800 {
		t.Fatalf("got %d lines, want 800", len(lines))
	}
	for _, l := range lines {
		var g, i int
		if _, err := fmt.Sscanf(string(l), "g%d line %d", &g, &i); err != nil {
			t.Fatalf("torn line %q", l)
		}
		if prev, ok := last[byte(g)]; ok && i != prev+1 {
			t.Fatalf("goroutine %d: line %d after %d", g, i, prev)
		}
		last[byte(g)] = i
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// gateSink is a destination whose first write blocks until open is
// closed; entered is closed once it has begun.
type gateSink struct {
	*sink
	entered, open chan struct{}
	once          sync.Once
}

func (g *gateSink) Write(p []byte) (int, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.open
	}
	return g.sink.Write(p)
}

// TestLineDuringSetDelayTakesNewDelay: a line that comes while SetDelay
// writes out what waited (a reload changing log.flush_interval, with
// requests answering meanwhile) waits the new delay, not the old one. The
// delay was set only after that write: the line armed the timer with the
// old delay, an hour here, and sat in the buffer for it.
func TestLineDuringSetDelayTakesNewDelay(t *testing.T) {
	t.Parallel()
	g := &gateSink{sink: newSink(), entered: make(chan struct{}), open: make(chan struct{})}
	b := New(g, time.Hour, 0)
	b.Write([]byte("before\n"))
	set := make(chan struct{})
	go func() {
		b.SetDelay(10 * time.Millisecond)
		close(set)
	}()
	<-g.entered // SetDelay is writing "before"
	b.Write([]byte("during\n"))
	close(g.open)
	<-set
	deadline := time.After(5 * time.Second)
	for {
		if got := g.all(); len(got) == 2 {
			if got[0] != "before\n" || got[1] != "during\n" {
				t.Fatalf("got %q, want the waiting line, then the one that came during SetDelay", got)
			}
			return
		}
		select {
		case <-g.wrote:
		case <-deadline:
			t.Fatalf("got %q; the line that came during SetDelay was not written within 5s (new delay 10ms)", g.all())
		}
	}
}
