// Package grafana holds a Grafana dashboard and a Prometheus scrape config for
// examples/metrics; its test checks that the dashboard reads only metrics weir
// has.
package grafana

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// metricName matches a weir metric's Prometheus name in a query: the name
// before its selector or range (a label such as weir_job_kind has neither).
var metricName = regexp.MustCompile(`\b(weir_[a-z_]+)[{[]`)

// TestDashboard checks that dashboard.json is JSON with a query in each panel,
// and that each metric a query reads is one docs/observability.md lists, which
// the weirprom test scrapes: a renamed metric fails here, not on a blank panel.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	doc, err := os.ReadFile("../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("dashboard.json has no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			matches := metricName.FindAllStringSubmatch(target.Expr, -1)
			if len(matches) == 0 {
				t.Errorf("panel %q: query %q reads no weir metric", p.Title, target.Expr)
			}
			for _, m := range matches {
				name := m[1]
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					name = strings.TrimSuffix(name, suffix)
				}
				if !strings.Contains(string(doc), "| `"+name+"` |") {
					t.Errorf("panel %q reads %s, which docs/observability.md does not list", p.Title, name)
				}
			}
		}
	}
}

// TestPrometheusConfig checks that the scrape config targets the example's
// default address.
func TestPrometheusConfig(t *testing.T) {
	data, err := os.ReadFile("prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `targets: ["127.0.0.1:9464"]`) {
		t.Fatal("prometheus.yml does not scrape 127.0.0.1:9464, examples/metrics' default")
	}
}
