package loopback

import (
	"net"
	"strconv"
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

func TestFreePortSkipsTakenPorts(t *testing.T) {
	t.Parallel()
	// Hold most of the range's ports in a small stretch and check none of
	// them comes back while held.
	held := map[int]net.Listener{}
	for p := low; p < low+200; p++ {
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			held[p] = ln
		}
	}
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for range 100 {
		p, err := FreePort(false)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := held[p]; ok {
			t.Fatalf("FreePort returned %d, which is held", p)
		}
	}
}
