package experiments

import (
	_ "embed"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mosaic-sched/mosaic/policies"
	"github.com/mosaic-sched/mosaic/policies/online"
	"github.com/mosaic-sched/mosaic/policies/placement"
	"github.com/mosaic-sched/mosaic/policies/solver"
	"github.com/mosaic-sched/mosaic/replay"
	"github.com/mosaic-sched/mosaic/sim"
	"github.com/mosaic-sched/mosaic/traces"
)

// experimentSource is this package's experiment.go: the reference reads the keys' documentation
// from the comments of the types that decode the file, so that it cannot drift from them.
//
//go:embed experiment.go
var experimentSource []byte

// codeDefaults are the defaults the code fills in from its constants, by key.
var codeDefaults = map[string]string{
	"seed":                               "0",
	"cluster.tp":                         "1",
	"engine.max_num_seqs":                strconv.Itoa(DefaultMaxNumSeqs) + " (or the preset's)",
	"engine.max_batched_tokens":          strconv.Itoa(DefaultMaxBatchedTokens) + " (or the preset's)",
	"engine.chunked_prefill":             "true (or the preset's)",
	"engine.gpu_memory_utilization":      strconv.FormatFloat(DefaultUtilization, 'g', -1, 64),
	"engine.block_size":                  strconv.Itoa(DefaultBlockSize),
	"engine.prefix_caching":              "false (or the preset's)",
	"engine.scheduling_policy":           sim.SchedulingFCFS,
	"workload.tokens_per_word":           strconv.FormatFloat(traces.DefaultTokensPerWord, 'g', -1, 64),
	"workload.warmup":                    strconv.FormatFloat(policies.DefaultWarmup, 'g', -1, 64),
	"workload.votes.options":             strconv.Itoa(traces.DefaultOptions),
	"workload.routing.keywords":          strconv.Itoa(traces.DefaultRoutingKeywords),
	"workload.routing.vocabulary":        strconv.Itoa(traces.DefaultRoutingVocabulary),
	"workload.routing.shared_vocabulary": strconv.Itoa(traces.DefaultRoutingSharedVocab),
	"workload.routing.shared":            strconv.FormatFloat(traces.DefaultRoutingShared, 'g', -1, 64),
	"workload.routing.zipf":              strconv.FormatFloat(traces.DefaultRoutingZipf, 'g', -1, 64),
	"workload.routing.temperature":       strconv.FormatFloat(traces.DefaultRoutingTemperature, 'g', -1, 64),
	"workload.arrival_rate":              "0 (an offline batch)",
	"replay.connect_timeout":             replay.DefaultTimeouts.Connect.String(),
	"replay.first_token_timeout":         replay.DefaultTimeouts.FirstToken.String(),
	"replay.idle_timeout":                replay.DefaultTimeouts.Idle.String(),
	"replay.request_timeout":             replay.DefaultTimeouts.Request.String(),
	"replay.admission_poll":              replay.DefaultAdmissionPoll.String(),
	"replay.command":                     "`" + replay.DefaultCommand + "`",
	"replay.retries":                     strconv.Itoa(DefaultRetries),
	"replay.retry_backoff":               replay.DefaultRetryBackoff.String(),
	"replay.api":                         string(replay.APIOpenAI),
	"replay.prompt_words":                strconv.Itoa(replay.DefaultPromptWords),
	"replay.reset_prefix_cache":          "true",
	"replay.time_scale":                  "1",
	"policy.mosaic.solver_time_limit":    solver.DefaultTimeLimit.String(),
	"policy.mosaic.order":                placement.OrderLongestFirst,
	"policy.mosaic.prefetch":             "true",
	"policy.pipeline.solver_time_limit":  solver.DefaultTimeLimit.String(),
	"policy.online.solver_time_limit":    solver.DefaultTimeLimit.String(),
	"policy.online.replan":               online.DefaultReplan.String(),
	"policy.online.max_in_flight":        "the engine's max_num_seqs",
}

// ConfigReference writes the experiment-file reference (docs/config.md): every key of every
// table with its TOML type, its default and unit where the documentation states them, an
// example value, and its documentation, all taken from the Experiment type and its comments.
// examples are experiment files (name and contents) whose values serve as the examples, the
// first file that sets a key giving it.
func ConfigReference(examples [][2]string) (string, error) {
	docs, err := fieldDocs()
	if err != nil {
		return "", err
	}
	var parsed []*Experiment
	for _, f := range examples {
		e, err := Parse(f[0], []byte(f[1]))
		if err != nil {
			return "", err
		}
		parsed = append(parsed, e)
	}
	example := func(key string) string {
		for _, e := range parsed {
			if v := exampleValue(reflect.ValueOf(e).Elem(), strings.Split(key, ".")); v != "" {
				return lastPart(key) + " = " + v
			}
		}
		return ""
	}
	var b strings.Builder
	b.WriteString(`# Experiment file reference

Generated from the types that decode an experiment file (` + "`experiments/experiment.go`" + `) and
their documentation; ` + "`go test ./experiments -run TestConfigReference -update`" + ` rewrites it, and the test
fails while it is out of date. Examples are values from the files under ` + "`experiments/`" + `. A key
may also be set on the command line: ` + "`--set workload.queries=200`" + `, ` + "`--set 'policy[1].threshold=0.5'`" + `.
Keys are matched exactly: an unknown key is an error naming its line. Durations are strings
("90s", "2m"). Defaults and units are given where the documentation states them; a distribution
is an inline table described under [Distributions](#distributions).

`)
	var walk func(t reflect.Type, prefix string, array bool)
	walk = func(t reflect.Type, prefix string, array bool) {
		var rows []string
		var subs []reflect.StructField
		for i := range t.NumField() {
			f := t.Field(i)
			tag := tomlName(f)
			if tag == "" {
				continue
			}
			ft := derefType(f.Type)
			if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[Dist]() && ft != reflect.TypeFor[time.Duration]() ||
				ft.Kind() == reflect.Slice && derefType(ft.Elem()).Kind() == reflect.Struct {
				subs = append(subs, f)
				continue
			}
			key := refJoin(prefix, tag)
			d := docs[t.Name()+"."+f.Name]
			def, ok := codeDefaults[key]
			if !ok {
				def = d.stated
			}
			rows = append(rows, fmt.Sprintf("| `%s` | %s | %s | %s | %s | %s |", tag, tomlType(f.Type), mdCell(def), mdCell(unitOf(tag, f.Type)),
				mdCell(codeSpan(example(key))), mdCell(d.text)))
		}
		if prefix != "" || len(rows) > 0 {
			title := "Top level"
			switch {
			case array:
				title = "`[[" + prefix + "]]`"
			case prefix != "":
				title = "`[" + prefix + "]`"
			}
			fmt.Fprintf(&b, "## %s\n\n", title)
			if td := docs[t.Name()].text; td != "" {
				fmt.Fprintf(&b, "%s\n\n", td)
			}
			if len(rows) > 0 {
				b.WriteString("| key | type | default | unit | example | meaning |\n|---|---|---|---|---|---|\n")
				b.WriteString(strings.Join(rows, "\n"))
				b.WriteString("\n\n")
			}
		}
		for _, f := range subs {
			ft := derefType(f.Type)
			isArray := ft.Kind() == reflect.Slice
			if isArray {
				ft = derefType(ft.Elem())
			}
			walk(ft, refJoin(prefix, tomlName(f)), isArray)
		}
	}
	walk(reflect.TypeFor[Experiment](), "", false)
	b.WriteString("## Distributions\n\n")
	fmt.Fprintf(&b, "%s\n\n", docs["Dist"].text)
	b.WriteString("| key | type | meaning |\n|---|---|---|\n")
	dt := reflect.TypeFor[Dist]()
	for i := range dt.NumField() {
		f := dt.Field(i)
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", tomlName(f), tomlType(f.Type), mdCell(docs["Dist."+f.Name].text))
	}
	return b.String(), nil
}

func refJoin(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// tomlType names a field's type as the file writes it.
func tomlType(t reflect.Type) string {
	t = derefType(t)
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case t == reflect.TypeFor[Dist]():
		return "distribution"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "float"
	case reflect.Slice:
		return "array of " + strings.TrimPrefix(strings.TrimPrefix(tomlType(t.Elem()), "array of "), "table of ") + "s"
	case reflect.Map:
		return "table of " + tomlType(t.Elem()) + "s"
	}
	return t.String()
}

var (
	defaultRE = regexp.MustCompile(`(?i)\bdefault\b(?::| is| to)? ([^;.)]+)`)
	wordRE    = regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)
)

// defaultOf is the default a field's documentation states ("the default" after a quoted
// value, "default: X", "default X"), or "".
func defaultOf(doc string) string {
	if i := strings.Index(doc, `" (the default)`); i >= 0 {
		if j := strings.LastIndex(doc[:i], `"`); j >= 0 {
			return doc[j : i+1]
		}
	}
	if m := defaultRE.FindStringSubmatch(doc); m != nil {
		return strings.TrimSpace(m[1])
	}
	return ""
}

// unitOf is a key's unit as its name or type says it.
func unitOf(key string, t reflect.Type) string {
	switch {
	case derefType(t) == reflect.TypeFor[time.Duration]():
		return "duration"
	case strings.HasSuffix(key, "_ms"):
		return "ms"
	case strings.HasSuffix(key, "_s"):
		return "s"
	case strings.HasSuffix(key, "_gbps"):
		return "GB/s"
	case strings.HasSuffix(key, "_gib"):
		return "GiB"
	case strings.HasSuffix(key, "tokens") || derefType(t) == reflect.TypeFor[Dist]() && strings.Contains(key, "token"):
		return "tokens"
	case key == "arrival_rate":
		return "per second"
	case strings.HasSuffix(key, "utilization") || key == "cap_share":
		return "fraction"
	}
	return ""
}

// exampleValue writes the first value the file sets at path below v (every element of a
// list tried in turn) as TOML, or "" when it sets none (or sets the zero value).
func exampleValue(v reflect.Value, path []string) string {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if len(path) == 0 {
		if v.IsZero() {
			return ""
		}
		return tomlValue(v)
	}
	if v.Kind() == reflect.Slice {
		for i := range v.Len() {
			if s := exampleValue(v.Index(i), path); s != "" {
				return s
			}
		}
		return ""
	}
	f, ok := fieldByTag(v, path[0])
	if !ok {
		return ""
	}
	return exampleValue(f, path[1:])
}

func lastPart(key string) string { return key[strings.LastIndex(key, ".")+1:] }

// tomlValue writes v as a TOML value.
func tomlValue(v reflect.Value) string {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return strconv.Quote(d.String())
	}
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice:
		var parts []string
		for i := range v.Len() {
			parts = append(parts, tomlValue(v.Index(i)))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Map:
		var parts []string
		for _, k := range v.MapKeys() {
			parts = append(parts, k.String()+" = "+tomlValue(v.MapIndex(k)))
		}
		slices.Sort(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	case reflect.Struct:
		var parts []string
		for i := range v.NumField() {
			if name := tomlName(v.Type().Field(i)); name != "" && !v.Field(i).IsZero() {
				parts = append(parts, name+" = "+tomlValue(v.Field(i)))
			}
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v.Interface())
}

func codeSpan(s string) string {
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// cell makes s fit a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// keyDoc is the documentation of a type or field: its text, and the default that the field's
// own comment states ("" when it states none).
type keyDoc struct{ text, stated string }

// fieldDocs reads experiment.go's documentation: "Type" for a type's doc comment and
// "Type.Field" for a field's, in which the Go names of the type's fields are replaced by
// their keys. A field without a comment of its own takes the sentences that name it from the
// comment of the field group above it, or else from its type's comment.
func fieldDocs() (map[string]keyDoc, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "experiment.go", experimentSource, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	out := map[string]keyDoc{}
	var p comment.Parser
	var pr comment.Printer
	text := func(cg *ast.CommentGroup) string {
		if cg == nil {
			return ""
		}
		return strings.TrimSpace(string(pr.Text(p.Parse(cg.Text()))))
	}
	for _, decl := range file.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			keys := map[string]string{}
			for _, f := range st.Fields.List {
				if f.Tag == nil {
					continue
				}
				tag, _ := strconv.Unquote(f.Tag.Value)
				name, _, _ := strings.Cut(reflect.StructTag(tag).Get("toml"), ",")
				for _, n := range f.Names {
					keys[n.Name] = name
				}
			}
			rename := func(s string) string {
				return wordRE.ReplaceAllStringFunc(s, func(w string) string {
					if k, ok := keys[w]; ok && k != "" && k != "-" {
						return "`" + k + "`"
					}
					return w
				})
			}
			doc := text(gd.Doc)
			if doc == "" {
				doc = text(ts.Doc)
			}
			out[ts.Name.Name] = keyDoc{text: rename(doc)}
			group := ""
			for _, f := range st.Fields.List {
				own := text(f.Doc)
				if own != "" {
					group = own
				}
				for _, n := range f.Names {
					d := own
					if d == "" {
						d = sentencesNaming(group, n.Name)
					}
					if d == "" {
						d = sentencesNaming(doc, n.Name)
					}
					kd := keyDoc{text: rename(d)}
					// A stated default is the field's when its own comment speaks of it alone.
					if own != "" && len(f.Names) == 1 && !namesOthers(own, n.Name, keys) {
						kd.stated = defaultOf(own)
					}
					out[ts.Name.Name+"."+n.Name] = kd
				}
			}
		}
	}
	return out, nil
}

// namesOthers reports whether text names a field of keys other than name.
func namesOthers(text, name string, keys map[string]string) bool {
	for _, w := range wordRE.FindAllString(text, -1) {
		if _, ok := keys[w]; ok && w != name {
			return true
		}
	}
	return false
}

// sentencesNaming returns the sentences of text that name the Go identifier name.
func sentencesNaming(text, name string) string {
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`)
	var out []string
	for _, s := range regexp.MustCompile(`(?s).+?(?:\.\s|\.$|$)`).FindAllString(text, -1) {
		if re.MatchString(s) {
			out = append(out, strings.TrimSpace(s))
		}
	}
	return strings.Join(out, " ")
}
