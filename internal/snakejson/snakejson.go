// Package snakejson writes Go values as JSON whose object keys are snake_case, as the results'
// CSV columns and the experiment file's keys are, whatever the Go field names: a field's key
// is its json tag's name, else its toml tag's name (the experiment file's own key), else its
// Go name in snake_case ("AllReduceHopUS" gives "all_reduce_hop_us"). Fields keep their
// declaration order, embedded structs are flattened as encoding/json flattens them, and
// "omitempty" in either tag is honoured. Values that marshal themselves (json.Marshaler,
// encoding.TextMarshaler) and map keys are written as encoding/json writes them.
package snakejson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"unicode"
)

// MarshalIndent is json.MarshalIndent of v with snake_case keys.
func MarshalIndent(v any, prefix, indent string) ([]byte, error) {
	n, err := convert(reflect.ValueOf(v))
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(n, prefix, indent)
}

// object is a JSON object that keeps its keys in order.
type object []member

type member struct {
	key   string
	value any
}

// MarshalJSON writes the members in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// convert turns v into something encoding/json writes with snake_case keys.
func convert(v reflect.Value) (any, error) {
	if !v.IsValid() {
		return nil, nil
	}
	t := v.Type()
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
			return nil, nil
		}
		return v.Interface(), nil
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, nil
		}
		return convert(v.Elem())
	case reflect.Struct:
		o := object{}
		if err := addFields(&o, v); err != nil {
			return nil, err
		}
		return o, nil
	case reflect.Slice:
		if v.IsNil() {
			return nil, nil
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return v.Interface(), nil // base64, as encoding/json writes []byte
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			e, err := convert(v.Index(i))
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case reflect.Map:
		if v.IsNil() {
			return nil, nil
		}
		// Keys are data (model names, categories), not field names: keep them, and let
		// encoding/json sort and format them.
		out := reflect.MakeMapWithSize(reflect.MapOf(t.Key(), reflect.TypeFor[any]()), v.Len())
		for it := v.MapRange(); it.Next(); {
			e, err := convert(it.Value())
			if err != nil {
				return nil, err
			}
			val := reflect.New(reflect.TypeFor[any]()).Elem()
			if e != nil {
				val.Set(reflect.ValueOf(e))
			}
			out.SetMapIndex(it.Key(), val)
		}
		return out.Interface(), nil
	default:
		return v.Interface(), nil
	}
}

// addFields appends v's exported fields to o, flattening embedded structs.
func addFields(o *object, v reflect.Value) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		name, omitEmpty, skip := key(f)
		if skip {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue
				}
				fv, ft = fv.Elem(), ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := addFields(o, fv); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if omitEmpty && fv.IsZero() {
			continue
		}
		if name == "" {
			name = Snake(f.Name)
		}
		val, err := convert(fv)
		if err != nil {
			return err
		}
		*o = append(*o, member{name, val})
	}
	return nil
}

// key is the field's name from its json or toml tag ("" when neither names it), whether a tag
// says omitempty, and whether a tag says "-".
func key(f reflect.StructField) (name string, omitEmpty, skip bool) {
	for _, tag := range []string{"json", "toml"} {
		s, ok := f.Tag.Lookup(tag)
		if !ok {
			continue
		}
		parts := strings.Split(s, ",")
		if parts[0] == "-" && len(parts) == 1 {
			return "", false, true
		}
		for _, p := range parts[1:] {
			omitEmpty = omitEmpty || p == "omitempty" || p == "omitzero"
		}
		if name == "" {
			name = parts[0]
		}
	}
	return name, omitEmpty, false
}

// Snake writes a Go identifier in snake_case: a word starts at an upper-case letter that
// follows a lower-case one, or that ends an acronym before a lower-case letter ("KVHeads"
// gives "kv_heads", "E2E" gives "e2e", "P99Tokens" gives "p99_tokens").
func Snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || ((unicode.IsUpper(prev) || unicode.IsDigit(prev)) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}
