package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int     `json:"id"`
	Type       string  `json:"type"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"` // a collapsed row keeps its panels here
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var metricName = regexp.MustCompile(`sluice_[a-z_]+`)

// familyOf maps a series name in a query to its metric family.
func familyOf(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok {
			return f
		}
	}
	return name
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../dashboards/sluice.json")
	if err != nil {
		t.Fatalf("reading dashboard: %v", err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("decoding dashboard: %v", err)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion: got %d, want at least 36", d.SchemaVersion)
	}

	m := New()
	exercise(m)
	exported := families(t, m)

	used := make(map[string]bool)
	check := func(where, expr string) {
		if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
			t.Errorf("%s: unbalanced brackets in %q", where, expr)
		}
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: query %q names no sluice metric", where, expr)
		}
		for _, n := range names {
			f := familyOf(n)
			if _, ok := exported[f]; !ok {
				t.Errorf("%s: query names %s, which sluice does not export", where, n)
			}
			used[f] = true
		}
	}

	vars := make(map[string]string)
	for _, v := range d.Templating.List {
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct{ Query string }
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: decoding query: %v", v.Name, err)
			}
			q = obj.Query
		}
		vars[v.Name] = v.Type + " " + q
		if v.Type == "query" {
			check("variable "+v.Name, q)
		}
	}
	for name, want := range map[string]string{
		"datasource": "datasource prometheus",
		"route":      "query label_values(sluice_http_requests_total, route)",
	} {
		if got := vars[name]; got != want {
			t.Errorf("variable %s: got %q, want %q", name, got, want)
		}
	}

	ids := make(map[int]bool)
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource got %s/%s, want prometheus/${datasource}", p.Title, p.Datasource.Type, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no targets", p.Title)
			}
			for _, tg := range p.Targets {
				check("panel "+strconv.Quote(p.Title), tg.Expr)
			}
		}
	}
	walk(d.Panels)

	for f := range exported {
		if strings.HasPrefix(f, "sluice_") && !used[f] {
			t.Errorf("%s: exported but on no dashboard panel", f)
		}
	}
}
