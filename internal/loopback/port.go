// Package loopback finds ports on 127.0.0.1 for servers that tests start as
// other processes (redis-server, pebble, the gateway binary).
package loopback

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
)

// The range ports are drawn from. It lies below Linux's ephemeral range
// (32768 and up by default), so no outgoing connection of a busy test run
// is handed the port between the check and the server's own bind, and so
// does port+10000, Redis Cluster's bus port.
const (
	low  = 10000
	high = 22000
)

// FreePort returns a port on 127.0.0.1 that nothing listens on, drawn at
// random from a range the kernel does not hand to outgoing connections.
// With bus set, port+10000 is free too. The port is free when FreePort
// returns; a server should bind it soon.
func FreePort(bus bool) (int, error) {
	for range 200 {
		port := low + rand.IntN(high-low)
		if !free(port) || (bus && !free(port+10000)) {
			continue
		}
		return port, nil
	}
	return 0, errors.New("finding a free loopback port: none free after 200 tries")
}

func free(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
