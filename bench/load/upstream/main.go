// Command upstream is the load benchmark's backend: every request gets the
// same 100-byte body with a Content-Length, over keep-alive connections.
// It does as little as an HTTP server can, so what the benchmark measures
// is the proxy in front of it.
//
// With -answer FILE it answers every request with the status, header
// fields and body that FILE holds (JSON, as the runner writes it from one
// of sluice's 429s): net/http writing the very bytes sluice sends, with no
// decision, no log and no metrics, the floor under sluice's 429 path.
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
)

// answer is a recorded response: what -answer reads.
type answer struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "listen `address`")
	file := flag.String("answer", "", "answer every request with the response recorded in `FILE`")
	flag.Parse()
	h := http.Handler(plain())
	if *file != "" {
		a, err := readAnswer(*file)
		if err != nil {
			log.Fatal(err)
		}
		h = a
	}
	log.Fatal((&http.Server{Addr: *addr, Handler: h}).ListenAndServe())
}

func plain() http.HandlerFunc {
	body := []byte(strings.Repeat("x", 99) + "\n")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.Header()["Content-Length"] = []string{"100"}
		w.Write(body)
	}
}

func readAnswer(path string) (*answer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, err
	}
	// net/http writes its own Date, as sluice's server does.
	a.Header.Del("Date")
	return &a, nil
}

// ServeHTTP sets each recorded field, sharing its value slice as sluice
// shares its precomputed ones, and writes the status and body.
func (a *answer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for k, v := range a.Header {
		h[k] = v
	}
	w.WriteHeader(a.Status)
	io.WriteString(w, a.Body)
}
