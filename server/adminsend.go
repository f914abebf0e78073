package server

import (
	"net/http"
	"time"
)

// sendBounded bounds each write of an admin answer (or of a redirect of
// tls.redirect_http) by send_timeout, as the gateway bounds its own: the
// listeners have no write timeout,
// and a client that asks /metrics again and again on a connection without
// reading the answers would otherwise hold the connection, its goroutine
// and one of the 4 scrapes /metrics serves at once, for as long as it
// stays open. send_timeout is read per request, so a reload applies it.
func (s *Server) sendBounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		send := s.cfg.Load().SendTimeout
		if send <= 0 {
			next.ServeHTTP(w, r)
			return
		}
		bw := &boundedWriter{ResponseWriter: w, ctl: http.NewResponseController(w), send: send}
		// Also bounds an answer with no body, which net/http writes after
		// the handler; it clears the deadline after each request.
		bw.extend()
		next.ServeHTTP(bw, r)
	})
}

// boundedWriter moves the write deadline send ahead before each write.
type boundedWriter struct {
	http.ResponseWriter
	ctl  *http.ResponseController
	send time.Duration
}

func (w *boundedWriter) extend() { w.ctl.SetWriteDeadline(time.Now().Add(w.send)) }

func (w *boundedWriter) Write(b []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(b)
}

func (w *boundedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
