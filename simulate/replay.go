package simulate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/sluicehq/sluice/routes"
)

// Log formats ReadLog recognises.
const (
	FormatSluice   = "sluice JSON access log"
	FormatCombined = "nginx combined log"
)

// maxLine bounds one log line; a longer one is a bad line.
const maxLine = 1 << 20

// byteOrderMark is UTF-8's byte order mark, which ReadLog skips at the
// start of a log.
const byteOrderMark = "\ufeff"

// ReplayOptions say how a log's requests map onto the policy's buckets.
type ReplayOptions struct {
	// Key is the policy's key list, such as ["header:X-API-Key", "ip"]. A
	// source no log records counts as empty and is named in the report.
	Key []string
	// Slots maps each route that lists the policy to the policy's place
	// among the route's limits: the index of its value in the keys field
	// that sluice logs with log_keys. A line of another route is left out
	// when Slots is not empty; a line that carries its keys is keyed by
	// them rather than by Key.
	Slots map[string]int
	// CaseSensitive names the routes that set match.case_sensitive: a
	// path key folds letter case on every other route, as the gateway's
	// does. A line that names no route (nginx's) folds it unless every
	// route of Slots is case-sensitive.
	CaseSensitive map[string]bool
	// Overrides are the policy's overrides, and Override the one a
	// request with key values key from client matches: 0 for none, k for
	// Overrides[k-1] (see Request.Override). key is bounded by
	// routes.BoundKey, as logged keys are, so Override must match a listed
	// key longer than routes.MaxKeyLen by its bounded form
	// (routes.Overrides.MatchBounded). Override may be nil.
	Overrides []Override
	Override  func(key []byte, client netip.Addr) int
}

// BadLine is a line ReadLog could not read, and why.
type BadLine struct {
	Line   int
	Reason string
}

// LogReport says what ReadLog made of a log.
type LogReport struct {
	// Format is FormatSluice or FormatCombined; "" when no line could be
	// read.
	Format string
	// Lines counts every line, blank ones included.
	Lines int
	// Requests counts the lines replayed.
	Requests int
	// Bad lists the lines that could not be read.
	Bad []BadLine
	// NotRequests counts sluice log lines that are not access lines
	// (startup, reload, errors); OtherRoutes those of routes that do not
	// list the policy; Blank the empty lines.
	NotRequests int
	OtherRoutes int
	Blank       int
	// Refused counts the requests the gateway answers before any limit
	// counts them: a key source given twice, a body over max_body, a
	// method or path it refuses, an nginx line that is no request.
	Refused int
	// LoggedKeys counts requests keyed by the keys the log carries.
	LoggedKeys int
	// Unrecorded lists the key sources the log does not record: they
	// took the empty value on every request not keyed by logged keys.
	Unrecorded []string
}

// ReadLog reads an access log, sluice's own JSON lines or nginx's combined
// format, told apart by content (the first line that reads as either
// decides), and returns its requests as traffic, keyed per consumer as the
// policy's key list says. Requests arrive at the line's time, less the
// duration sluice logged, so lines written when requests finished are
// replayed in order of arrival; nginx's whole seconds are spread evenly
// over the second. The origin is the hour of the first arrival (UTC).
//
// Lines that cannot be read are listed in the report, never dropped
// silently. The error is non-nil only when reading r failed or the log
// holds more than MaxTraffic requests.
func ReadLog(r io.Reader, o ReplayOptions) (*Traffic, *LogReport, error) {
	key, err := readKey(o.Key)
	if err != nil {
		return nil, nil, err
	}
	rep := &LogReport{}
	tr := &Traffic{Clock: true, Overrides: o.Overrides}
	ids := make(map[string]int32)
	var arrivals []int64 // unix nanoseconds, one per request
	unrecorded := make([]bool, len(key))
	// take counts one line's outcome, in order of lines.
	take := func(n int, out *outcome, k []byte) error {
		switch out.kind {
		case badLine:
			rep.Bad = append(rep.Bad, BadLine{n, out.reason})
		case blankLine:
			rep.Blank++
		case notRequestLine:
			rep.NotRequests++
		case otherRouteLine:
			rep.OtherRoutes++
		case refusedLine:
			rep.Refused++
		case requestLine:
			if len(arrivals) >= MaxTraffic {
				return fmt.Errorf("line %d: more than %d requests", n, MaxTraffic)
			}
			if out.logged {
				rep.LoggedKeys++
			}
			id, ok := ids[string(k)]
			if !ok {
				id = int32(len(tr.Keys))
				s := string(k)
				ids[s] = id
				tr.Keys = append(tr.Keys, s)
			}
			arrivals = append(arrivals, out.arrival)
			tr.Requests = append(tr.Requests, Request{Consumer: id, Override: out.override, GiveUp: out.gaveUp})
		}
		return nil
	}

	// Lines are read in order; until one tells the format they are parsed
	// here, then in chunks by a parser per core.
	br := bufio.NewReaderSize(r, 64<<10)
	// A log saved by a Windows editor may open with a UTF-8 byte order
	// mark, which is no part of its first line.
	if b, _ := br.Peek(len(byteOrderMark)); string(b) == byteOrderMark {
		br.Discard(len(byteOrderMark))
	}
	lp := newLineParser(key, o)
	lp.unrecorded = unrecorded
	for rep.Format == "" {
		text, tooLong, err := readLine(br)
		if len(text) == 0 && !tooLong && err != nil {
			if errors.Is(err, io.EOF) {
				return finishLog(tr, rep, arrivals, key, unrecorded)
			}
			return nil, nil, fmt.Errorf("reading line %d: %w", rep.Lines+1, err)
		}
		rep.Lines++
		out, k := lp.parse(text, tooLong, "")
		if out.kind != badLine && out.kind != blankLine {
			rep.Format = out.format
		}
		if err := take(rep.Lines, &out, k); err != nil {
			return nil, nil, err
		}
	}
	chunks := parseChunks(br, rep.Lines, rep.Format, key, o)
	for c := range chunks {
		<-c.done
		if c.err != nil {
			drain(chunks)
			return nil, nil, fmt.Errorf("reading line %d: %w", c.first+len(c.lines), c.err)
		}
		for i := range c.outs {
			out := &c.outs[i]
			if err := take(c.first+i, out, c.keys[out.key.from:out.key.to]); err != nil {
				drain(chunks)
				return nil, nil, err
			}
		}
		rep.Lines = c.first + len(c.outs) - 1
		for i, u := range c.unrecorded {
			unrecorded[i] = unrecorded[i] || u
		}
		chunkPool.Put(c)
	}
	return finishLog(tr, rep, arrivals, key, unrecorded)
}

// finishLog places the requests on the virtual clock.
func finishLog(tr *Traffic, rep *LogReport, arrivals []int64, key []keySource, unrecorded []bool) (*Traffic, *LogReport, error) {
	for i, u := range unrecorded {
		if u {
			rep.Unrecorded = append(rep.Unrecorded, key[i].text)
		}
	}
	rep.Requests = len(tr.Requests)
	if rep.Requests == 0 {
		return tr, rep, nil
	}
	first := arrivals[0]
	for _, a := range arrivals {
		first = min(first, a)
	}
	tr.Origin = time.Unix(0, first).UTC().Truncate(time.Hour)
	base := tr.Origin.UnixNano()
	for i, a := range arrivals {
		tr.Requests[i].At = time.Duration(a - base)
	}
	tr.Sort()
	if rep.Format == FormatCombined {
		spreadSeconds(tr.Requests)
	}
	return tr, rep, nil
}

// What a line turned out to be.
const (
	requestLine = iota
	badLine
	blankLine
	notRequestLine
	otherRouteLine
	refusedLine
)

// outcome is what parsing one line gave.
type outcome struct {
	kind     uint8
	override uint16 // see Request.Override
	logged   bool   // keyed by the keys the log carries
	format   string // the format it read as
	reason   string // why a bad line is bad
	arrival  int64
	gaveUp   time.Duration // see Request.GiveUp
	key      span          // in the chunk's keys
}

// lineParser parses lines and builds their keys; one per goroutine.
type lineParser struct {
	key []keySource
	o   ReplayOptions
	// foldUnnamed: a path key folds letter case on lines that name no
	// route (see ReplayOptions.CaseSensitive).
	foldUnnamed bool
	sr          *sluiceReader
	unrecorded  []bool
	l           line
	keyBuf      []byte
}

func newLineParser(key []keySource, o ReplayOptions) *lineParser {
	lp := &lineParser{key: key, o: o, sr: newSluiceReader(), unrecorded: make([]bool, len(key))}
	lp.foldUnnamed = len(o.Slots) == 0
	for r := range o.Slots {
		lp.foldUnnamed = lp.foldUnnamed || !o.CaseSensitive[r]
	}
	return lp
}

// parse reads one line in format ("" until it is known) and returns what
// it is and, for a request, its consumer's key (valid until the next call).
func (lp *lineParser) parse(text []byte, tooLong bool, format string) (outcome, []byte) {
	if tooLong {
		return outcome{kind: badLine, reason: fmt.Sprintf("longer than %d bytes", maxLine)}, nil
	}
	text = bytes.TrimRight(text, "\r\n")
	trimmed := bytes.TrimSpace(text)
	if len(trimmed) == 0 {
		return outcome{kind: blankLine}, nil
	}
	// JSON allows whitespace before the object, as the reader does once
	// the format is known: the first line is told apart the same way.
	object := trimmed[0] == '{'
	l := &lp.l
	*l = line{}
	var err error
	out := outcome{format: format}
	switch {
	case format == FormatSluice || format == "" && object:
		err = lp.sr.read(text, l)
		out.format = FormatSluice
	default:
		err = l.readCombined(text)
		out.format = FormatCombined
	}
	if err != nil {
		out.kind, out.reason = badLine, err.Error()
		if format == "" && !object {
			// A line that opens a JSON object is no combined line: the
			// reason the JSON reader gives is the one that counts.
			out.reason = "neither a sluice JSON log line nor nginx's combined format: " + out.reason
		}
		return out, nil
	}
	if l.notRequest {
		out.kind = notRequestLine
		return out, nil
	}
	slot, listed := lp.o.Slots[l.route]
	if len(lp.o.Slots) > 0 && out.format == FormatSluice && !listed {
		out.kind = otherRouteLine
		return out, nil
	}
	if l.refused {
		out.kind = refusedLine
		return out, nil
	}
	out.arrival, out.gaveUp = l.arrival, l.gaveUp
	k := lp.keyBuf[:0]
	defer func() { lp.keyBuf = k[:0] }()
	if listed && l.keys != nil && slot >= 0 && slot < len(l.keys) {
		k = routes.BoundKey(append(k, l.keys[slot]...), 0)
		out.logged = true
	} else {
		fold := !lp.o.CaseSensitive[l.route]
		if l.route == "" {
			fold = lp.foldUnnamed
		}
		var ok bool
		if k, ok = appendKey(k, lp.key, &l.logged, fold); !ok {
			out.kind = refusedLine
			return out, nil
		}
		for i, s := range lp.key {
			if !s.readable(&l.logged) {
				lp.unrecorded[i] = true
			}
		}
	}
	if lp.o.Override != nil {
		// k is bounded, as a logged key is: Override matches a listed
		// key longer than routes.MaxKeyLen by its digest.
		out.override = uint16(lp.o.Override(k, l.client))
	}
	return out, k
}

// chunk is a run of lines parsed together.
type chunk struct {
	first      int // number of its first line
	data       []byte
	lines      []span // in data
	long       []bool // lines too long, left out of data
	outs       []outcome
	keys       []byte // the requests' keys
	unrecorded []bool
	err        error         // reading failed after its lines
	done       chan struct{} // closed when parsed
}

// linesPerChunk is how many lines a parser takes at a time.
const linesPerChunk = 4096

// chunkPool recycles chunks and their buffers.
var chunkPool = sync.Pool{New: func() any {
	return &chunk{
		lines: make([]span, 0, linesPerChunk),
		long:  make([]bool, 0, linesPerChunk),
		outs:  make([]outcome, 0, linesPerChunk),
	}
}}

// newChunk returns an empty chunk whose lines start at line first.
func newChunk(first int) *chunk {
	c := chunkPool.Get().(*chunk)
	c.first, c.err, c.done = first, nil, make(chan struct{})
	c.data, c.lines, c.long = c.data[:0], c.lines[:0], c.long[:0]
	c.outs, c.keys = c.outs[:0], c.keys[:0]
	return c
}

// parseChunks reads the rest of br in chunks, which parsers on every core
// parse while the next are read, and sends them in order of lines.
func parseChunks(br *bufio.Reader, read int, format string, key []keySource, o ReplayOptions) chan *chunk {
	ordered := make(chan *chunk, 2*runtime.GOMAXPROCS(0))
	work := make(chan *chunk, 2*runtime.GOMAXPROCS(0))
	for range runtime.GOMAXPROCS(0) {
		go func() {
			lp := newLineParser(key, o)
			for c := range work {
				clear(lp.unrecorded)
				for i, sp := range c.lines {
					out, k := lp.parse(c.data[sp.from:sp.to], c.long[i], format)
					from := len(c.keys)
					c.keys = append(c.keys, k...)
					out.key = span{from, len(c.keys)}
					c.outs = append(c.outs, out)
				}
				c.unrecorded = append(c.unrecorded[:0], lp.unrecorded...)
				close(c.done)
			}
		}()
	}
	go func() {
		defer close(ordered)
		defer close(work)
		next := read + 1
		for {
			c := newChunk(next)
			var err error
			for len(c.lines) < linesPerChunk {
				var text []byte
				var tooLong bool
				text, tooLong, err = readLine(br)
				if len(text) == 0 && !tooLong && err != nil {
					break
				}
				from := len(c.data)
				c.data = append(c.data, text...)
				c.lines = append(c.lines, span{from, len(c.data)})
				c.long = append(c.long, tooLong)
				err = nil
			}
			if err != nil && !errors.Is(err, io.EOF) {
				c.err = err
			}
			if len(c.lines) == 0 && c.err == nil {
				return
			}
			next += len(c.lines)
			// c is not to be touched once sent on: the reader returns it
			// to chunkPool, and another ReadLog may take it at once.
			failed := c.err != nil
			if failed {
				close(c.done)
			} else {
				work <- c
			}
			ordered <- c
			if failed || err != nil {
				return
			}
		}
	}()
	return ordered
}

// drain lets parseChunks finish after an error.
func drain(chunks chan *chunk) {
	go func() {
		for range chunks {
		}
	}()
}

// spreadSeconds spreads the requests logged in one whole second evenly over
// it, in the order logged: nginx's $time_local has no finer resolution, and
// bunching a second's requests at its start would show bursts that never
// happened.
func spreadSeconds(rs []Request) {
	for i := 0; i < len(rs); {
		j := i + 1
		for j < len(rs) && rs[j].At == rs[i].At {
			j++
		}
		n := time.Duration(j - i)
		for k := i; k < j; k++ {
			rs[k].At += time.Duration(k-i) * time.Second / n
		}
		i = j
	}
}

// readLine returns the next line, without its end. A line longer than
// maxLine is consumed and reported as too long.
func readLine(br *bufio.Reader) ([]byte, bool, error) {
	text, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return text, false, err
	}
	long := append([]byte(nil), text...)
	for errors.Is(err, bufio.ErrBufferFull) {
		text, err = br.ReadSlice('\n')
		if len(long) <= maxLine {
			long = append(long, text...)
		}
	}
	if len(bytes.TrimRight(long, "\r\n")) > maxLine {
		return nil, true, ignoreEOF(err)
	}
	return long, false, err
}

func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// line is one parsed log line.
type line struct {
	logged
	arrival    int64    // unix nanoseconds
	keys       []string // sluice's logged keys, nil when absent
	notRequest bool     // a sluice log line other than an access line
	refused    bool     // a request the gateway answers before any limit counts it
	// gaveUp is how long a request waited in a queue before it left
	// without reaching the upstream; 0 for one that did not.
	gaveUp time.Duration
}

// sluiceReader reads lines of sluice's JSON log, reusing its buffers from
// line to line.
type sluiceReader struct {
	src   bytes.Reader
	dec   *jsontext.Decoder
	arena []byte // the line's string values, unquoted
	keys  []span
}

// span is a string value's place in the arena.
type span struct{ from, to int }

func newSluiceReader() *sluiceReader {
	return &sluiceReader{dec: jsontext.NewDecoder(bytes.NewReader(nil))}
}

// The fields of an access line that replay uses.
const (
	fTime = iota
	fRoute
	fMethod
	fPath
	fClient
	fMsg
	fUpstream
	fRejectedBy
	fRawPath
	nFields
)

// fieldsRead is what reading one JSON line found.
type fieldsRead struct {
	fields   [nFields]span
	seen     [nFields]bool
	hasKeys  bool
	duration float64
	// status is 0 when the line gives none; wait is queue_wait_ms.
	status, wait float64
}

// read reads one line of sluice's JSON log into l: slog's time and msg,
// and the access line's fields (see the README's Access log). Its strings
// share one allocation. Lines as slog writes them take a fast path; any
// other line goes through the full JSON decoder, which also words the
// errors.
func (sr *sluiceReader) read(text []byte, l *line) error {
	var fr fieldsRead
	sr.arena, sr.keys = sr.arena[:0], sr.keys[:0]
	if !sr.fast(text, &fr) {
		fr = fieldsRead{}
		sr.arena, sr.keys = sr.arena[:0], sr.keys[:0]
		if err := sr.decode(text, &fr); err != nil {
			return err
		}
	}
	str := string(sr.arena)
	get := func(f int) string { return str[fr.fields[f].from:fr.fields[f].to] }
	switch {
	case !fr.seen[fMsg]:
		return errors.New("no msg: not a sluice log line")
	case get(fMsg) != "request":
		l.notRequest = true
		return nil
	case !fr.seen[fTime]:
		return errors.New("no time")
	}
	t, err := time.Parse(time.RFC3339Nano, get(fTime))
	if err != nil {
		return fmt.Errorf("time %q: want RFC 3339", truncate(get(fTime)))
	}
	if err := checkTime(t); err != nil {
		return err
	}
	// The line is written when the request finishes.
	arrival := t.Add(-time.Duration(fr.duration * float64(time.Millisecond)))
	if err := checkTime(arrival); err != nil {
		return fmt.Errorf("arrival (time less duration_ms): %v", err)
	}
	l.arrival = arrival.UnixNano()
	l.route, l.method, l.path, l.hasRoute = get(fRoute), get(fMethod), unescapeLogged(get(fPath)), true
	l.rawPath = unescapeLogged(get(fRawPath)) // "" when the path needs no escapes of its own
	// A request that went neither to the upstream, nor to a rejecting
	// limit, nor into a queue, and failed, was answered by the gateway
	// before any limit counted it: on its route, a key source or
	// Content-Type given twice (400), a body over max_body (413) or too
	// slow for json: keys (408), a store that failed (503); with no route,
	// a request line or path refused before routing (400) or a CONNECT
	// (501). A 404 is left to the limit being tried.
	if !fr.seen[fUpstream] && !fr.seen[fRejectedBy] && fr.wait == 0 && fr.status >= 400 {
		l.refused = l.route != "" || fr.status == 400 || fr.status == 501
	}
	// One that waited in a leaky_bucket queue and never went to the
	// upstream left the queue after its wait: its client went away
	// (499), or shutdown cut it off (503).
	if !fr.seen[fUpstream] && fr.wait > 0 {
		l.gaveUp = max(time.Duration(fr.wait*float64(time.Millisecond)), 1)
	}
	// The gateway logs a request without an address as "invalid IP".
	l.client, _ = netip.ParseAddr(get(fClient))
	if fr.hasKeys {
		l.keys = make([]string, len(sr.keys))
		for i, k := range sr.keys {
			l.keys[i] = unescapeLogged(str[k.from:k.to])
		}
	}
	return nil
}

// escapedMark opens a path or key value that the access log wrote with
// escapes, as it writes one that is not UTF-8 (or that starts with the
// mark): '%' and each byte that is not UTF-8 as %XX.
const escapedMark = "%!"

// unescapeLogged returns the path or key value the access log wrote as v.
func unescapeLogged(v string) string {
	rest, ok := strings.CutPrefix(v, escapedMark)
	if !ok {
		return v
	}
	b := make([]byte, 0, len(rest))
	for i := 0; i < len(rest); i++ {
		if rest[i] == '%' && i+2 < len(rest) && isHex(rest[i+1]) && isHex(rest[i+2]) {
			b = append(b, unhex(rest[i+1])<<4|unhex(rest[i+2]))
			i += 2
			continue
		}
		b = append(b, rest[i])
	}
	return string(b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// fieldOf names the access line's fields replay uses; -1 for the others.
func fieldOf(quotedName []byte) int {
	switch string(quotedName) {
	case `"time"`:
		return fTime
	case `"route"`:
		return fRoute
	case `"method"`:
		return fMethod
	case `"path"`:
		return fPath
	case `"client_ip"`:
		return fClient
	case `"msg"`:
		return fMsg
	case `"upstream"`:
		return fUpstream
	case `"rejected_by"`:
		return fRejectedBy
	case `"raw_path"`:
		return fRawPath
	}
	return -1
}

// numberOf names the access line's numbers replay uses and returns where
// fr keeps each, with the largest value it takes; nil for the others.
func numberOf(quotedName []byte, fr *fieldsRead) (*float64, float64) {
	switch string(quotedName) {
	case `"duration_ms"`:
		return &fr.duration, maxDuration
	case `"queue_wait_ms"`:
		return &fr.wait, maxDuration
	case `"status"`:
		return &fr.status, 999
	}
	return nil, 0
}

// maxDuration is the longest duration_ms a line may give: as long as the
// virtual clock spans. A WebSocket or a stream may stay open for days.
const maxDuration = float64(MaxOffset / time.Millisecond)

// decode reads a line with the full JSON decoder.
func (sr *sluiceReader) decode(text []byte, fr *fieldsRead) error {
	sr.src.Reset(text)
	sr.dec.Reset(&sr.src)
	dec := sr.dec
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != jsontext.KindBeginObject {
		return errors.New("not a JSON object")
	}
	for dec.PeekKind() != jsontext.KindEndObject {
		name, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("not JSON: %v", shortErr(err))
		}
		if v, most := numberOf(name, fr); v != nil {
			field := name[1 : len(name)-1]
			tok, err := dec.ReadToken()
			if err != nil || tok.Kind() != jsontext.KindNumber {
				return fmt.Errorf("%s: want a number", field)
			}
			*v, _ = tok.Float()
			if *v < 0 || *v > most {
				return fmt.Errorf("%s: %v out of range (0 to %v)", field, *v, most)
			}
			continue
		}
		switch string(name) {
		case `"keys"`:
			if fr.hasKeys, err = sr.readKeys(); err != nil {
				return fmt.Errorf("keys: %v", err)
			}
			continue
		}
		f := fieldOf(name)
		if f < 0 {
			if err := dec.SkipValue(); err != nil {
				return fmt.Errorf("not JSON: %v", shortErr(err))
			}
			continue
		}
		if fr.fields[f], err = sr.readString(); err != nil {
			return fmt.Errorf("%s: %v", name[1:len(name)-1], err)
		}
		fr.seen[f] = true
	}
	if _, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("not JSON: %v", shortErr(err))
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value")
	}
	return nil
}

// fast reads a line as slog writes it: one flat object whose names and
// strings hold no escapes, control or non-ASCII bytes, whose values are
// such strings, numbers, true, false or null, and keys an array of such
// strings. It reports false for anything else, leaving the line to decode.
func (sr *sluiceReader) fast(text []byte, fr *fieldsRead) bool {
	var names [24][]byte // to refuse duplicate names, as decode does
	n := 0
	i := skipSpace(text, 0)
	if i >= len(text) || text[i] != '{' {
		return false
	}
	i = skipSpace(text, i+1)
	if i < len(text) && text[i] == '}' {
		i++
	} else {
		for {
			from, to, ok := plainString(text, i)
			if !ok || n == len(names) {
				return false
			}
			name := text[from-1 : to+1]
			for _, prev := range names[:n] {
				if bytes.Equal(prev, name) {
					return false
				}
			}
			names[n], n = name, n+1
			i = skipSpace(text, to+1)
			if i >= len(text) || text[i] != ':' {
				return false
			}
			i = skipSpace(text, i+1)
			v, most := numberOf(name, fr)
			switch f := fieldOf(name); {
			case string(name) == `"keys"`:
				if i, ok = sr.fastKeys(text, i, fr); !ok {
					return false
				}
			case v != nil:
				end := numberEnd(text, i)
				if end < 0 {
					return false
				}
				d, err := strconv.ParseFloat(string(text[i:end]), 64)
				if err != nil || d < 0 || d > most {
					return false
				}
				*v, i = d, end
			case f >= 0:
				from, to, ok := plainString(text, i)
				if !ok {
					return false
				}
				start := len(sr.arena)
				sr.arena = append(sr.arena, text[from:to]...)
				fr.fields[f], fr.seen[f] = span{start, len(sr.arena)}, true
				i = to + 1
			default:
				if i = plainValue(text, i); i < 0 {
					return false
				}
			}
			i = skipSpace(text, i)
			if i >= len(text) {
				return false
			}
			if text[i] == '}' {
				i++
				break
			}
			if text[i] != ',' {
				return false
			}
			i = skipSpace(text, i+1)
		}
	}
	return skipSpace(text, i) == len(text)
}

// fastKeys reads the keys field's array (or null) at i and returns where
// it ends.
func (sr *sluiceReader) fastKeys(text []byte, i int, fr *fieldsRead) (int, bool) {
	if bytes.HasPrefix(text[i:], []byte("null")) {
		fr.hasKeys = false
		sr.keys = sr.keys[:0]
		return i + 4, true
	}
	if i >= len(text) || text[i] != '[' {
		return 0, false
	}
	sr.keys = sr.keys[:0]
	i = skipSpace(text, i+1)
	if i < len(text) && text[i] == ']' {
		fr.hasKeys = true
		return i + 1, true
	}
	for {
		from, to, ok := plainString(text, i)
		if !ok {
			return 0, false
		}
		start := len(sr.arena)
		sr.arena = append(sr.arena, text[from:to]...)
		sr.keys = append(sr.keys, span{start, len(sr.arena)})
		i = skipSpace(text, to+1)
		if i >= len(text) {
			return 0, false
		}
		if text[i] == ']' {
			fr.hasKeys = true
			return i + 1, true
		}
		if text[i] != ',' {
			return 0, false
		}
		i = skipSpace(text, i+1)
	}
}

// plainString finds a string at i holding only printable ASCII other than
// backslash and returns the bounds of its contents.
func plainString(text []byte, i int) (int, int, bool) {
	if i >= len(text) || text[i] != '"' {
		return 0, 0, false
	}
	for j := i + 1; j < len(text); j++ {
		switch c := text[j]; {
		case c == '"':
			return i + 1, j, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// plainValue returns where a plain string, a number, true, false or null
// at i ends; -1 for anything else.
func plainValue(text []byte, i int) int {
	if i >= len(text) {
		return -1
	}
	switch text[i] {
	case '"':
		if _, to, ok := plainString(text, i); ok {
			return to + 1
		}
		return -1
	case 't', 'f', 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(text[i:], []byte(lit)) {
				return i + len(lit)
			}
		}
		return -1
	}
	return numberEnd(text, i)
}

// numberEnd returns where the JSON number at i ends; -1 when there is
// none.
func numberEnd(text []byte, i int) int {
	digits := func(j int) int {
		k := j
		for k < len(text) && '0' <= text[k] && text[k] <= '9' {
			k++
		}
		return k
	}
	if i < len(text) && text[i] == '-' {
		i++
	}
	switch {
	case i < len(text) && text[i] == '0':
		i++
	case i < len(text) && '1' <= text[i] && text[i] <= '9':
		i = digits(i)
	default:
		return -1
	}
	if i < len(text) && text[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(text) && (text[i] == 'e' || text[i] == 'E') {
		i++
		if i < len(text) && (text[i] == '+' || text[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipSpace(text []byte, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n') {
		i++
	}
	return i
}

// readString reads a string value into the arena.
func (sr *sluiceReader) readString() (span, error) {
	v, err := sr.dec.ReadValue()
	if err != nil {
		return span{}, fmt.Errorf("not JSON: %v", shortErr(err))
	}
	if v.Kind() != jsontext.KindString {
		return span{}, errors.New("want a string")
	}
	from := len(sr.arena)
	if bytes.IndexByte(v, '\\') < 0 {
		sr.arena = append(sr.arena, v[1:len(v)-1]...)
	} else if sr.arena, err = jsontext.AppendUnquote(sr.arena, v); err != nil {
		return span{}, err
	}
	return span{from, len(sr.arena)}, nil
}

// readKeys reads the keys field, reporting whether it holds an array.
func (sr *sluiceReader) readKeys() (bool, error) {
	tok, err := sr.dec.ReadToken()
	if err != nil {
		return false, fmt.Errorf("not JSON: %v", shortErr(err))
	}
	if tok.Kind() == jsontext.KindNull {
		return false, nil
	}
	if tok.Kind() != jsontext.KindBeginArray {
		return false, errors.New("want an array of strings")
	}
	sr.keys = sr.keys[:0]
	for sr.dec.PeekKind() != jsontext.KindEndArray {
		k, err := sr.readString()
		if err != nil {
			return false, err
		}
		sr.keys = append(sr.keys, k)
	}
	_, err = sr.dec.ReadToken()
	return true, err
}

// shortErr keeps a decoder's message to its point.
func shortErr(err error) string {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	return err.Error()
}

// truncate keeps a value quoted in a message short.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// readCombined reads one line of nginx's combined format:
//
//	$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
//
// Fields nginx appends after these (as many setups do) are ignored.
func (l *line) readCombined(text []byte) error {
	s := string(text)
	addr, s, ok := cutByte(s, ' ')
	if !ok {
		return errCombined
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return fmt.Errorf("remote_addr %q: not an IP address", truncate(addr))
	}
	l.client = a
	// "- $remote_user [$time_local] ": nginx escapes '"' in the user
	// but not spaces or brackets, which a Basic auth user name may hold,
	// so the quote that opens $request ends the user and the time, and
	// the time opens at the last '['.
	if len(s) < 2 || s[0] != '-' || s[1] != ' ' {
		return errCombined
	}
	s = s[2:]
	q := strings.IndexByte(s, '"')
	if q < 0 {
		return errCombined
	}
	head := strings.TrimRight(s[:q], " ")
	open := strings.LastIndexByte(head, '[')
	if open < 1 || head[open-1] != ' ' || head[len(head)-1] != ']' {
		return errCombined
	}
	stamp := head[open+1 : len(head)-1]
	s = s[q:]
	t, err := time.Parse("02/Jan/2006:15:04:05 -0700", stamp)
	if err != nil {
		return fmt.Errorf("time_local %q: want 02/Jan/2006:15:04:05 -0700", truncate(stamp))
	}
	if err := checkTime(t); err != nil {
		return err
	}
	l.arrival = t.UnixNano()
	request, s, err := quoted(s)
	if err != nil {
		return fmt.Errorf("request: %v", err)
	}
	// nginx writes $status in three digits, 000 when none was set (the
	// request cut off before one was) and 009 for HTTP/0.9: whatever it
	// is, the request line decides whether the line is a request.
	status, s, _ := cutByte(trimSpace(s), ' ')
	if len(status) != 3 || !isDigit(status[0]) || !isDigit(status[1]) || !isDigit(status[2]) {
		return fmt.Errorf("status %q: want three digits", truncate(status))
	}
	_, s, _ = cutByte(trimSpace(s), ' ') // $body_bytes_sent
	referer, s, err := quoted(s)
	if err != nil {
		return fmt.Errorf("http_referer: %v", err)
	}
	agent, _, err := quoted(s)
	if err != nil {
		return fmt.Errorf("http_user_agent: %v", err)
	}
	l.referer, l.userAgent = dash(referer), dash(agent)
	l.hasAgent, l.hasQuery = true, true
	// "$request" is "METHOD TARGET PROTOCOL". A connection that sent no
	// request (a preconnect that timed out: 408) or one nginx could not
	// parse (TLS on the plain port: 400) is logged as it came, often
	// "-": never a request, so no limit counts it, as the gateway's
	// server answers such a request line itself.
	method, rest, _ := cutByte(request, ' ')
	target, proto, ok := cutByte(rest, ' ')
	if !ok || target == "" || !strings.HasPrefix(proto, "HTTP/") || strings.IndexByte(proto, ' ') >= 0 {
		l.refused = true
		return nil
	}
	// The gateway's canonical request: method upper-cased, path with
	// repeated slashes merged; a method or path it refuses is a 400 no
	// limit counts.
	if l.method, err = routes.CanonicalMethod(method); err != nil {
		l.refused = true
	}
	if !l.readTarget(target) {
		l.refused = true
	}
	return nil
}

// readTarget reads a request target as the gateway's server and its
// canonical form read it: the path escaped (rawPath) and decoded (path),
// repeated slashes merged, and the query. An absolute-form target
// ("http://host/v1/x", as a client may send and nginx logs it) is its
// path. It reports false for a target the gateway answers 400.
func (l *logged) readTarget(target string) bool {
	u, err := url.ParseRequestURI(target)
	if err != nil || u.Opaque != "" {
		return false
	}
	// EscapedPath is the spelling as sent when it is a valid escaping,
	// else the decoded path escaped anew, as the gateway keys it.
	esc := u.EscapedPath()
	l.rawQuery = u.RawQuery
	c, err := routes.CanonicalPath(esc)
	if err != nil {
		return false
	}
	if l.path, err = url.PathUnescape(c); err != nil {
		return false
	}
	l.rawPath = c
	return true
}

var errCombined = errors.New("not in nginx's combined format")

// Times a log line may carry: the virtual clock counts nanoseconds from
// the first request in an int64, and no gateway ran before 1970.
var (
	earliest = time.Date(1970, time.January, 1, 0, 0, 0, 0, time.UTC)
	latest   = time.Date(2200, time.January, 1, 0, 0, 0, 0, time.UTC)
)

func checkTime(t time.Time) error {
	if t.Before(earliest) || !t.Before(latest) {
		return fmt.Errorf("time %s: out of range (1970 to 2199)", t.Format(time.RFC3339))
	}
	return nil
}

// quoted reads a double-quoted field after optional spaces, undoing nginx's
// \xHH and backslash escapes, and returns it and the rest.
func quoted(s string) (string, string, error) {
	s = trimSpace(s)
	if len(s) == 0 || s[0] != '"' {
		return "", "", errors.New("want a quoted field")
	}
	var b []byte
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			if b == nil {
				return s[1:i], s[i+1:], nil
			}
			return string(b), s[i+1:], nil
		case c == '\\' && i+1 < len(s):
			if b == nil {
				b = append([]byte(nil), s[1:i]...)
			}
			if s[i+1] == 'x' && i+3 < len(s) {
				if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
					b = append(b, byte(v))
					i += 3
					continue
				}
			}
			b = append(b, s[i+1])
			i++
		case b != nil:
			b = append(b, c)
		}
	}
	return "", "", errors.New("unterminated quoted field")
}

func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

func cutByte(s string, c byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func trimSpace(s string) string {
	for len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	return s
}
