//go:build !unix

package proxy

import "net"

// quietCheck reports whether nothing has come on an idle connection since
// its last answer was read: no byte and no close.
type quietCheck func() bool

// newQuietCheck returns nil: without a non-blocking peek, an idle
// connection the upstream closed shows when it is used, and an idempotent
// request then goes again on another one.
func newQuietCheck(net.Conn) quietCheck { return nil }
