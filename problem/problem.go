// Package problem writes RFC 9457 problem details (application/problem+json),
// the body of every error sluice answers itself.
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Details is a problem body. Type is "about:blank" unless set; Title
// defaults to the status text. Policy and RetryAfter are sluice's extension
// members for 429 answers and are left out when empty.
type Details struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail,omitempty"`
	Instance   string `json:"instance,omitempty"`
	Policy     string `json:"policy,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
}

// Write sends p with its status. It sets Content-Type and Content-Length and
// tells caches not to keep the answer.
func Write(w http.ResponseWriter, p Details) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: every field is a plain value
		body = []byte(`{"type":"about:blank","status":500}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Encoding")
	w.WriteHeader(p.Status)
	w.Write(body)
}

// Error writes a problem of the given status with a human-readable detail.
func Error(w http.ResponseWriter, status int, detail string) {
	Write(w, Details{Status: status, Detail: detail})
}
