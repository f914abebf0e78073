package loopback

import (
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

func TestFreePort(t *testing.T) {
	t.Parallel()
	for _, bus := range []bool{false, true} {
		p, err := FreePort(bus)
		if err != nil {
			t.Fatal(err)
		}
		if p < low || p >= high {
			t.Errorf("port %d outside [%d, %d)", p, low, high)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listening on FreePort's %d: %v", p, err)
		}
		ln.Close()
	}
}

// The tests below bind ports of their own stretch, which lies above both
// FreePort's range and the bus ports 10000 above it, and below the kernel's
// ephemeral range: a port of FreePort's they bound would fail the server of
// another test process that was handed it.
const ownLo, ownHi = high + 10000, 32768

func TestFreePortSkipsTakenPorts(t *testing.T) {
	t.Parallel()
	// Hold most ports of a small stretch and check none of them comes back
	// while held.
	const lo, hi = ownLo, ownLo + 200
	held := map[int]net.Listener{}
	for p := lo; p < hi-20; p++ {
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			held[p] = ln
		}
	}
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	var set portSet
	got := map[int]bool{}
	for range 10 {
		p, err := set.draw(lo, hi, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := held[p]; ok {
			t.Fatalf("draw returned %d, which is held", p)
		}
		if got[p] {
			t.Fatalf("draw returned %d twice", p)
		}
		got[p] = true
	}
}

func TestFreePortWhileForking(t *testing.T) {
	// Processes started from other goroutines while a port is checked must
	// not inherit the check's socket: the port would still be bound when
	// the caller starts its server on it.
	trueCmd, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				exec.Command(trueCmd).Run()
			}
		})
	}
	defer wg.Wait()
	defer stop.Store(true)
	for range 1000 {
		var set portSet
		p, err := set.draw(ownLo, ownHi, false)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listening on a port just found free: %v", err)
		}
		ln.Close()
	}
}
