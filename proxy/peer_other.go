//go:build !linux

package proxy

import "net"

// canCheckPeer says peerClosed can read a connection's TCP state: only on
// Linux, which reports it through TCP_INFO.
const canCheckPeer = false

func peerClosed(net.Conn) bool { return false }
