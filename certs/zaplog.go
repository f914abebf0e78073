package certs

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// certmagic's info messages are routine chatter ("acquiring lock",
// "waiting on internal rate limiter", ...) and go to debug: the Manager logs
// a certificate's life from certmagic's events instead. These few keep
// their info level.
var infoMessages = map[string]bool{
	"new ACME account registered":                   true,
	"certificate expires soon; queuing for renewal": true,
	"certificate needs renewal based on ARI window": true,
}

// newZapLogger returns a zap logger whose entries go to h. The logger's
// name becomes the "logger" attribute.
func newZapLogger(h slog.Handler) *zap.Logger {
	return zap.New(&slogCore{h: h})
}

// slogCore is a zapcore.Core that writes to a slog.Handler.
type slogCore struct {
	h slog.Handler
}

var _ zapcore.Core = (*slogCore)(nil)

func (c *slogCore) Enabled(l zapcore.Level) bool {
	// An info entry may be demoted to debug by Check, never raised, so
	// asking about its highest possible level is enough here.
	return c.h.Enabled(context.Background(), slogLevel(l, ""))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{h: c.h.WithAttrs(attrs(fields))}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.h.Enabled(context.Background(), slogLevel(e.Level, e.Message)) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	level := slogLevel(e.Level, e.Message)
	if canceled(fields) {
		// Work that Stop cut short ("job failed": "obtaining
		// certificate: context canceled") is no failure: without this
		// every stop while a certificate is pending logged an error.
		level = slog.LevelDebug
		if !c.h.Enabled(context.Background(), level) {
			return nil
		}
	}
	r := slog.NewRecord(e.Time, level, e.Message, 0)
	// certmagic names sub-loggers from an unnamed root, giving ".acme_client".
	if name := strings.TrimPrefix(e.LoggerName, "."); name != "" {
		r.AddAttrs(slog.String("logger", name))
	}
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }

// canceled reports whether one of fields is an error that a canceled
// context caused.
func canceled(fields []zapcore.Field) bool {
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType && errors.Is(err, context.Canceled) {
			return true
		}
	}
	return false
}

// clientMessages are certmagic errors any client can cause at will, which
// go to debug as failed handshakes do: a handshake offering only
// acme-tls/1 with a name no challenge is under way for ("tls-alpn
// challenge"), or a GET of /.well-known/acme-challenge/ whose Host no
// file in storage can be named after (a Host of kilobytes: "looking up
// info for HTTP challenge"), would otherwise write a line, with text the
// client chose, per request. A real validation that fails shows as a
// failed issuance, which is logged from certmagic's events.
var clientMessages = map[string]bool{
	"tls-alpn challenge":                 true,
	"looking up info for HTTP challenge": true,
}

func slogLevel(l zapcore.Level, msg string) slog.Level {
	switch {
	case clientMessages[msg]:
		return slog.LevelDebug
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		if msg == "" || infoMessages[msg] {
			return slog.LevelInfo
		}
		return slog.LevelDebug
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// attrs converts zap fields to slog attributes in key order.
func attrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		v := enc.Fields[k]
		if d, ok := v.(time.Duration); ok {
			v = d.String() // "1m0s" rather than nanoseconds
		}
		out = append(out, slog.Any(k, v))
	}
	return out
}
