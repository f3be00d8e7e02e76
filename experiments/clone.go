package experiments

import (
	"fmt"
	"maps"
	"reflect"
)

// Clone returns a deep copy of the experiment as decoded, with its overrides: setting a key
// of the copy (Set) or resolving it (Resolve fills some defaults in) leaves e as it was. The
// copy shares only what nothing changes: the file's key positions, for messages. A sweep
// parses its file once and gives each point such a copy.
func (e *Experiment) Clone() *Experiment {
	c := &Experiment{file: e.file, dir: e.dir, overrides: maps.Clone(e.overrides), ownPolicies: e.ownPolicies, durationApplied: e.durationApplied}
	src, dst := reflect.ValueOf(e).Elem(), reflect.ValueOf(c).Elem()
	for i := range src.NumField() {
		if src.Type().Field(i).IsExported() {
			deepCopy(dst.Field(i), src.Field(i))
		}
	}
	return c
}

// deepCopy sets dst to a copy of src that shares no pointer, slice or map with it. The
// experiment's tables hold only exported fields, scalars, pointers, slices and maps; anything
// else is a programming error (a new kind of field Clone must learn to copy).
func deepCopy(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		n := reflect.New(src.Type().Elem())
		deepCopy(n.Elem(), src.Elem())
		dst.Set(n)
	case reflect.Struct:
		t := src.Type()
		for i := range src.NumField() {
			if !t.Field(i).IsExported() {
				panic(fmt.Sprintf("experiments: Clone cannot copy the unexported field %s.%s", t, t.Field(i).Name))
			}
			deepCopy(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		n := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			deepCopy(n.Index(i), src.Index(i))
		}
		dst.Set(n)
	case reflect.Array:
		for i := range src.Len() {
			deepCopy(dst.Index(i), src.Index(i))
		}
	case reflect.Map:
		if src.IsNil() {
			return
		}
		n := reflect.MakeMapWithSize(src.Type(), src.Len())
		for it := src.MapRange(); it.Next(); {
			k := reflect.New(it.Key().Type()).Elem()
			deepCopy(k, it.Key())
			v := reflect.New(it.Value().Type()).Elem()
			deepCopy(v, it.Value())
			n.SetMapIndex(k, v)
		}
		dst.Set(n)
	case reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		panic(fmt.Sprintf("experiments: Clone cannot copy a %s (%s)", src.Kind(), src.Type()))
	default:
		dst.Set(src)
	}
}
