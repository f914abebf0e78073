// Command upstream is the load benchmark's backend: every request gets the
// same 100-byte body with a Content-Length, over keep-alive connections.
// It does as little as an HTTP server can, so what the benchmark measures
// is the proxy in front of it.
package main

import (
	"flag"
	"log"
	"net/http"
	"strings"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen `address`")
	flag.Parse()
	body := []byte(strings.Repeat("x", 99) + "\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.Header()["Content-Length"] = []string{"100"}
		w.Write(body)
	})
	log.Fatal((&http.Server{Addr: *addr, Handler: h}).ListenAndServe())
}
