// Package loopback finds ports on 127.0.0.1 for servers that tests start as
// other processes (redis-server, pebble, the gateway binary).
package loopback

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// The range ports are drawn from. It lies below Linux's ephemeral range
// (32768 and up by default), so no outgoing connection of a busy test run
// is handed the port between the check and the server's own bind, and so
// does port+10000, Redis Cluster's bus port.
const (
	low  = 10000
	high = 22000
)

// handed holds the ports this process has handed out: a server started
// for one test may bind its port only after another test checked the same
// port and found it free, so a port is handed out once per process.
var handed portSet

// FreePort returns a port on 127.0.0.1 that nothing listens on and that
// this process has not handed out before, drawn at random from a range the
// kernel does not hand to outgoing connections. With bus set, port+10000
// is free too. The port is free when FreePort returns; a server should
// bind it soon.
func FreePort(bus bool) (int, error) { return handed.draw(low, high, bus) }

// portSet is a set of ports handed out.
type portSet struct {
	mu    sync.Mutex
	ports map[int]bool
}

// draw returns a port of [lo, hi) that is free and not in the set, and
// adds it (and with bus, port+10000) to the set.
func (s *portSet) draw(lo, hi int, bus bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports == nil {
		s.ports = make(map[int]bool)
	}
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		if s.ports[port] || !free(port) || (bus && !free(port+10000)) {
			continue
		}
		s.ports[port] = true
		if bus {
			s.ports[port+10000] = true
		}
		return port, nil
	}
	return 0, errors.New("finding a free loopback port: none free after 200 tries")
}

// free reports whether port can be bound on 127.0.0.1 by binding it and
// letting go. It holds syscall.ForkLock while the check's socket is open:
// a process started from another goroutine in between would inherit the
// socket until it execs, and the server started on the port right after
// would find it still in use.
func free(port int) bool {
	probeOnce.Do(probeClone)
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

var probeOnce sync.Once

// probeClone runs, under ForkLock, the clone the os package makes once per
// process, on its first process start, to learn whether the kernel hands
// out pidfds. That clone does not take ForkLock, and its child holds a copy
// of every open socket until it exits; a port checked at that moment would
// stay bound for a moment after free let go of it.
func probeClone() {
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Release()
	}
}
