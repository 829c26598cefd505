// Command gen-kustomize writes the kustomize layout of bridge/deploy from
// the chart in bridge/deploy/chart: `helm template` with the chart's
// default values, one file per template, the namespace left to the
// kustomization. `make manifests` runs it; bridge/deploy's tests fail
// when the files it wrote differ from what the chart renders.
//
//	go run ./bridge/deploy/gen-kustomize -deploy bridge/deploy
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/cdiexec/cdi/bridge/deploy/internal/helmchart"
)

func main() {
	deploy := flag.String("deploy", "bridge/deploy", "the kustomize directory; its chart is chart/")
	flag.Parse()
	if err := generate(context.Background(), *deploy); err != nil {
		fmt.Fprintln(os.Stderr, "gen-kustomize:", err)
		os.Exit(1)
	}
}

// generate renders the chart and writes every template's file.
func generate(ctx context.Context, deploy string) error {
	chart := filepath.Join(deploy, "chart")
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	var v struct{ Namespace string }
	if err := yaml.Unmarshal(values, &v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(chart, "values.yaml"), err)
	}
	out, err := helmchart.Template(ctx, chart)
	if err != nil {
		return err
	}
	docs, err := helmchart.Split(out)
	if err != nil {
		return err
	}
	files := helmchart.Kustomize(docs, v.Namespace)
	for _, rel := range helmchart.Sources(files) {
		dst := filepath.Join(deploy, filepath.FromSlash(rel))
		if err := os.WriteFile(dst, files[rel], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", dst)
	}
	return nil
}
