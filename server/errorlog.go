package server

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
)

// errorLog is the ErrorLog of sluice's http.Servers. net/http writes every
// problem there as one line of text; errorLog gives each the level an
// operator needs:
//
//   - "http: Accept error" (EMFILE, ENFILE, ...): error. The listener is
//     retrying and refusing clients meanwhile; this must not hide at debug.
//   - "http: TLS handshake error": debug. Scanners, clients that give up,
//     and clients that do not trust the certificate produce them all day;
//     at info they would drown the log, and a client cannot act on them.
//   - anything else (a superfluous WriteHeader, an HTTP/2 protocol error):
//     warn.
func errorLog(l *slog.Logger) *log.Logger {
	return log.New(&errorLogWriter{log: l}, "", 0)
}

type errorLogWriter struct{ log *slog.Logger }

func (w *errorLogWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelWarn
	switch {
	case strings.HasPrefix(msg, "http: Accept error"):
		level = slog.LevelError
	case strings.HasPrefix(msg, "http: TLS handshake error"):
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, msg, "component", "http")
	return len(p), nil
}
