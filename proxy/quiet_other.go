//go:build !unix

package proxy

import "net"

// quietCheck reports whether nothing has come on an idle connection since
// its last answer was read: no byte and no close.
type quietCheck func() bool

// canPeek is false: without a non-blocking peek, bytes an upstream sent on
// an idle connection would be taken for the next answer, so every request
// goes through http.Transport, whose read goroutine watches idle
// connections.
const canPeek = false

func newQuietCheck(net.Conn) quietCheck { return nil }
