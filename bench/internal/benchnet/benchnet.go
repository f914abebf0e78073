// Package benchnet holds what the load benchmarks' commands share to start
// processes on 127.0.0.1 and print their figures. Failures end the
// command (log.Fatal): a benchmark that cannot start has nothing to report.
package benchnet

import (
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"
)

// FreeAddr returns a loopback address with a port nobody listens on now.
func FreeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// WaitUp polls url until it answers, for at most 10 s.
func WaitUp(url string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("%s did not answer: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Micros formats d in whole microseconds, "123 µs".
func Micros(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + " µs"
}
