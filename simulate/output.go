package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// tableHeader names the table's columns, in order.
var tableHeader = []string{"algorithm", "accepted", "rejected", "queued", "peak"}

// WriteTable writes rs as a table with a header row: the algorithm name
// left-aligned, the counts right-aligned, columns two spaces apart.
func WriteTable(w io.Writer, rs []Result) error {
	var b bytes.Buffer
	rows := [][]string{tableHeader}
	for _, r := range rs {
		rows = append(rows, []string{r.Algorithm, strconv.Itoa(r.Accepted), strconv.Itoa(r.Rejected), strconv.Itoa(r.Queued), strconv.Itoa(r.Peak)})
	}
	writeRows(&b, rows)
	return flush(w, &b, "table")
}

// WriteConsumerTable writes rs as WriteTable does, with a consumers_limited
// column, and then a second table of each algorithm's most limited
// consumers: their keys with showKeys, else the keys' digests.
func WriteConsumerTable(w io.Writer, rs []Result, showKeys bool) error {
	var b bytes.Buffer
	rows := [][]string{append(tableHeader[:len(tableHeader):len(tableHeader)], "consumers_limited")}
	for _, r := range rs {
		rows = append(rows, []string{r.Algorithm, strconv.Itoa(r.Accepted), strconv.Itoa(r.Rejected), strconv.Itoa(r.Queued), strconv.Itoa(r.Peak), strconv.Itoa(r.ConsumersLimited)})
	}
	writeRows(&b, rows)
	rows = [][]string{{"algorithm", "most limited", "requests", "rejected"}}
	for _, r := range rs {
		for _, c := range r.MostLimited {
			rows = append(rows, []string{r.Algorithm, consumerName(c.Key, showKeys), strconv.Itoa(c.Requests), strconv.Itoa(c.Rejected)})
		}
	}
	if len(rows) > 1 {
		b.WriteByte('\n')
		writeRows(&b, rows)
	}
	return flush(w, &b, "table")
}

// writeRows aligns rows in columns: the first two left-aligned when the
// second holds names (a consumer table), the counts right-aligned.
func writeRows(b *bytes.Buffer, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
	}
	names := rows[0][1] == "most limited"
	for _, row := range rows {
		fmt.Fprintf(b, "%-*s", widths[0], row[0])
		for i := 1; i < len(row); i++ {
			if i == 1 && names {
				fmt.Fprintf(b, "  %-*s", widths[i], row[i])
				continue
			}
			fmt.Fprintf(b, "  %*s", widths[i], row[i])
		}
		b.Truncate(len(bytes.TrimRight(b.Bytes(), " ")))
		b.WriteByte('\n')
	}
}

// consumerName is how a consumer is shown: its digest, or with showKeys its
// key, quoted when it holds anything but printable text so that a key sent
// by a client cannot drive the terminal.
func consumerName(key string, showKeys bool) string {
	if !showKeys {
		return Digest(key)
	}
	if key == "" || strings.ContainsFunc(key, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' || r == '"' }) {
		return strconv.QuoteToASCII(key)
	}
	return key
}

func flush(w io.Writer, b *bytes.Buffer, what string) error {
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	return nil
}

// WriteJSON writes rs as a JSON array with one object per algorithm, each on
// its own line:
//
//	{"algorithm":"fixed_window","accepted":200,"rejected":0,"queued":0,"peak":200}
func WriteJSON(w io.Writer, rs []Result) error {
	objs := make([]any, len(rs))
	for i, r := range rs {
		objs[i] = r
	}
	return writeArray(w, rs, objs)
}

// consumerJSON is a Result with its consumers, for WriteConsumerJSON.
type consumerJSON struct {
	Result
	ConsumersLimited int            `json:"consumers_limited"`
	MostLimited      []consumerItem `json:"most_limited"`
}

type consumerItem struct {
	Consumer string `json:"consumer"`
	Requests int    `json:"requests"`
	Rejected int    `json:"rejected"`
}

// WriteConsumerJSON writes rs as WriteJSON does, each object with
// "consumers_limited" and "most_limited", a list of the most limited
// consumers as {"consumer":..., "requests":..., "rejected":...}: their keys
// with showKeys, else the keys' digests.
func WriteConsumerJSON(w io.Writer, rs []Result, showKeys bool) error {
	objs := make([]any, len(rs))
	for i, r := range rs {
		o := consumerJSON{Result: r, ConsumersLimited: r.ConsumersLimited, MostLimited: []consumerItem{}}
		for _, c := range r.MostLimited {
			name := Digest(c.Key)
			if showKeys {
				name = c.Key
			}
			o.MostLimited = append(o.MostLimited, consumerItem{name, c.Requests, c.Rejected})
		}
		objs[i] = o
	}
	return writeArray(w, rs, objs)
}

func writeArray(w io.Writer, rs []Result, objs []any) error {
	var b bytes.Buffer
	b.WriteString("[")
	for i, o := range objs {
		obj, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encoding %s result: %w", rs[i].Algorithm, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n  ")
		b.Write(obj)
	}
	if len(objs) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	return flush(w, &b, "json")
}

// WriteAccuracy writes a's figures as text: the decisions that differ,
// wrongly allowed and wrongly limited, each as a count and a share of the
// requests, the worst window, and Cloudflare's published figure beside
// them.
func WriteAccuracy(w io.Writer, a *Accuracy, showKeys bool) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "sliding_window_counter against the exact sliding_window_log, limit %d per %s\n", a.Limit, shortDuration(a.Window))
	fmt.Fprintf(&b, "%s from %s, each algorithm with its own buckets\n\n", plural(a.Requests, "request"), plural(a.Consumers, "consumer"))
	writeRows(&b, [][]string{
		{"", "requests", "share"},
		{"decisions that differ", strconv.Itoa(a.Differ()), percent(a.Share(a.Differ()))},
		{"  wrongly allowed", strconv.Itoa(a.WronglyAllowed), percent(a.Share(a.WronglyAllowed))},
		{"  wrongly limited", strconv.Itoa(a.WronglyLimited), percent(a.Share(a.WronglyLimited))},
	})
	fmt.Fprintf(&b, "admitted in all: %d by the counter, %d by the log (%+d)\n", a.CounterAdmitted, a.ExactAdmitted, a.CounterAdmitted-a.ExactAdmitted)
	if a.WorstConsumer == "" {
		fmt.Fprintf(&b, "worst window: nothing admitted\n")
	} else {
		fmt.Fprintf(&b, "worst window: %d admitted in one %s where the limit is %d: %d over (%s of the limit),\n", a.WorstAdmitted, shortDuration(a.Window), a.Limit, a.OverAdmission(), percent(100*float64(a.OverAdmission())/float64(a.Limit)))
		fmt.Fprintf(&b, "  consumer %s, the window ending at %s\n", consumerName(a.WorstConsumer, showKeys), a.worstAt())
	}
	fmt.Fprintf(&b, "Cloudflare's published figure: %s of 400 million requests wrongly allowed or limited\n", percent(CloudflareWrongShare))
	return flush(w, &b, "accuracy")
}

// accuracyJSON is the JSON form of an Accuracy.
type accuracyJSON struct {
	Limit                   int64   `json:"limit"`
	WindowSeconds           float64 `json:"window_seconds"`
	Requests                int     `json:"requests"`
	Consumers               int     `json:"consumers"`
	Differ                  int     `json:"differ"`
	DifferPercent           float64 `json:"differ_percent"`
	WronglyAllowed          int     `json:"wrongly_allowed"`
	WronglyAllowedPercent   float64 `json:"wrongly_allowed_percent"`
	WronglyLimited          int     `json:"wrongly_limited"`
	WronglyLimitedPercent   float64 `json:"wrongly_limited_percent"`
	CounterAdmitted         int     `json:"counter_admitted"`
	ExactAdmitted           int     `json:"exact_admitted"`
	WorstWindowAdmitted     int     `json:"worst_window_admitted"`
	WorstOverAdmission      int     `json:"worst_over_admission"`
	WorstConsumer           string  `json:"worst_consumer"`
	CloudflareWrongPercent  float64 `json:"cloudflare_wrong_percent"`
	CloudflareRequestsCount int     `json:"cloudflare_requests"`
}

// WriteAccuracyJSON writes a as one JSON object.
func WriteAccuracyJSON(w io.Writer, a *Accuracy, showKeys bool) error {
	o := accuracyJSON{
		Limit: a.Limit, WindowSeconds: a.Window.Seconds(), Requests: a.Requests, Consumers: a.Consumers,
		Differ: a.Differ(), DifferPercent: a.Share(a.Differ()),
		WronglyAllowed: a.WronglyAllowed, WronglyAllowedPercent: a.Share(a.WronglyAllowed),
		WronglyLimited: a.WronglyLimited, WronglyLimitedPercent: a.Share(a.WronglyLimited),
		CounterAdmitted: a.CounterAdmitted, ExactAdmitted: a.ExactAdmitted,
		WorstWindowAdmitted: a.WorstAdmitted, WorstOverAdmission: a.OverAdmission(),
		CloudflareWrongPercent: CloudflareWrongShare, CloudflareRequestsCount: CloudflareRequests,
	}
	if a.WorstConsumer != "" {
		o.WorstConsumer = Digest(a.WorstConsumer)
		if showKeys {
			o.WorstConsumer = a.WorstConsumer
		}
	}
	obj, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encoding accuracy: %w", err)
	}
	var b bytes.Buffer
	b.Write(obj)
	b.WriteByte('\n')
	return flush(w, &b, "json")
}

// percent formats a percentage with enough digits for small shares.
func percent(p float64) string {
	switch {
	case p == 0:
		return "0%"
	case p < 0.01:
		return strconv.FormatFloat(p, 'g', 2, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 3, 64) + "%"
}
