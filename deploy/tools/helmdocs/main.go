package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

const (
	beginMarker = "<!-- values:begin -->"
	endMarker   = "<!-- values:end -->"
)

func main() {
	check := flag.Bool("check", false, "fail if README.md's table is not what values.yaml gives, instead of writing it")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: helmdocs [-check] CHARTDIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *check); err != nil {
		fmt.Fprintln(os.Stderr, "helmdocs:", err)
		os.Exit(1)
	}
}

// errStale is run's error for a table that is not up to date.
var errStale = errors.New("the values table is not up to date: run make helm-docs")

func run(chart string, check bool) error {
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	rows, err := valueRows(values)
	if err != nil {
		return err
	}
	readmePath := filepath.Join(chart, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	updated, err := replaceTable(readme, table(rows))
	if err != nil {
		return fmt.Errorf("%s: %w", readmePath, err)
	}
	if bytes.Equal(updated, readme) {
		return nil
	}
	if check {
		return fmt.Errorf("%s: %w", readmePath, errStale)
	}
	return os.WriteFile(readmePath, updated, 0o644)
}

// row is one value of the table.
type row struct{ key, def, desc string }

// valueRows reads values.yaml's keys in order.
func valueRows(values []byte) ([]row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml: want one mapping")
	}
	var rows []row
	if err := walk(doc.Content[0], "", &rows); err != nil {
		return nil, err
	}
	return rows, nil
}

func walk(m *yaml.Node, prefix string, rows *[]row) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		desc := description(k.HeadComment)
		if desc == "" {
			return fmt.Errorf("values.yaml line %d: %s has no comment", k.Line, key)
		}
		if v.Kind == yaml.MappingNode && documented(v) {
			*rows = append(*rows, row{key: key, desc: desc})
			if err := walk(v, key+".", rows); err != nil {
				return err
			}
			continue
		}
		def, err := jsonOf(v)
		if err != nil {
			return fmt.Errorf("values.yaml line %d: %s: %w", k.Line, key, err)
		}
		*rows = append(*rows, row{key: key, def: def, desc: desc})
	}
	return nil
}

// documented reports whether a map's keys have comments: it is then a
// section of the table, else one value.
func documented(m *yaml.Node) bool {
	for i := 0; i < len(m.Content); i += 2 {
		if description(m.Content[i].HeadComment) != "" {
			return true
		}
	}
	return false
}

// description is the last paragraph of a head comment, on one line.
func description(comment string) string {
	paras := strings.Split(strings.TrimSpace(comment), "\n\n")
	var words []string
	for _, l := range strings.Split(paras[len(paras)-1], "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		l = strings.TrimPrefix(l, "-- ")
		if l != "" {
			words = append(words, l)
		}
	}
	return strings.Join(words, " ")
}

func jsonOf(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// table is rows as a Markdown table.
func table(rows []row) string {
	var b strings.Builder
	b.WriteString("| Key | Default | Description |\n| --- | --- | --- |\n")
	for _, r := range rows {
		def := ""
		if r.def != "" {
			def = "`" + r.def + "`"
		}
		key := "`" + r.key + "`"
		if r.def == "" {
			key = "**" + key + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", key, def, strings.ReplaceAll(r.desc, "|", `\|`))
	}
	return b.String()
}

// replaceTable puts table between readme's markers.
func replaceTable(readme []byte, table string) ([]byte, error) {
	s := string(readme)
	i := strings.Index(s, beginMarker)
	j := strings.Index(s, endMarker)
	if i < 0 || j < i {
		return nil, fmt.Errorf("no %s ... %s lines", beginMarker, endMarker)
	}
	return []byte(s[:i+len(beginMarker)] + "\n" + table + s[j:]), nil
}
