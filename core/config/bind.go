package config

import (
	"errors"
	"fmt"
	"reflect"
)

// Binding between the key table and the Config/Runtime structs, by the
// `key:"…"` struct tag. Using one index for filling, printing and the
// agreement test keeps the three from disagreeing about which field is
// which key.

// fieldPath is the reflect index path of a tagged leaf field.
type fieldPath []int

// fieldIndex maps key names to field paths inside a struct type.
type fieldIndex map[string]fieldPath

var (
	configFields  = indexFields(reflect.TypeFor[Config]())
	runtimeFields = indexFields(reflect.TypeFor[Runtime]())
)

// indexFields walks a struct type. Fields of struct type are sections and
// are walked into; every other field must carry a key tag.
func indexFields(t reflect.Type) fieldIndex {
	idx := fieldIndex{}
	var walk func(t reflect.Type, prefix []int)
	walk = func(t reflect.Type, prefix []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			path := append(append([]int(nil), prefix...), i)
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, path)
				continue
			}
			name, ok := f.Tag.Lookup("key")
			if !ok || name == "" {
				panic(fmt.Sprintf("config: field %s.%s has no key tag", t.Name(), f.Name))
			}
			if _, dup := idx[name]; dup {
				panic("config: key tag " + name + " used twice")
			}
			idx[name] = path
		}
	}
	walk(t, nil)
	return idx
}

// setField stores a merged value (string, int64, bool, []string or
// []SeedUser) into the tagged field; named string types such as Secret
// take strings.
func setField(root reflect.Value, path fieldPath, v any) {
	f := root.FieldByIndex(path)
	switch x := v.(type) {
	case string:
		f.SetString(x)
	case int64:
		f.SetInt(x)
	case bool:
		f.SetBool(x)
	case []string:
		f.Set(reflect.ValueOf(append([]string{}, x...)))
	case []SeedUser:
		f.Set(reflect.ValueOf(append([]SeedUser(nil), x...)))
	case nil:
	default:
		panic(fmt.Sprintf("config: cannot store %T", v))
	}
}

// getField reads a tagged field back as the table's value type.
func getField(root reflect.Value, path fieldPath) any {
	f := root.FieldByIndex(path)
	switch f.Kind() {
	case reflect.String:
		return f.String()
	case reflect.Int64:
		return f.Int()
	case reflect.Bool:
		return f.Bool()
	}
	return f.Interface()
}

// ValueOf returns the value of a key in cfg (or, for runtime-only keys, in
// DefaultRuntime), as string, int64, bool, []string or []SeedUser. Secrets
// are returned in clear; callers that show values must check Key.Secret.
func ValueOf(cfg *Config, key string) (any, bool) {
	if p, ok := configFields[key]; ok {
		return getField(reflect.ValueOf(cfg).Elem(), p), true
	}
	if p, ok := runtimeFields[key]; ok {
		r := DefaultRuntime()
		return getField(reflect.ValueOf(&r).Elem(), p), true
	}
	return nil, false
}

// Defaults returns the configuration made of built-in defaults only, with
// optional booleans resolved. It is what Load returns for an empty
// command line and environment.
func Defaults() *Config {
	cfg := &Config{}
	rv := reflect.ValueOf(cfg).Elem()
	for i := range keys {
		k := &keys[i]
		if k.Class == RuntimeOnly {
			continue
		}
		setField(rv, configFields[k.Name], k.Default)
	}
	for i := range keys {
		if k := &keys[i]; k.Kind == KindOptBool {
			setField(rv, configFields[k.Name], getField(rv, configFields[k.Follows]))
		}
	}
	return cfg
}

// DefaultRuntime returns the built-in values of the runtime-only settings.
func DefaultRuntime() Runtime {
	var r Runtime
	rv := reflect.ValueOf(&r).Elem()
	for i := range keys {
		if k := &keys[i]; k.Class == RuntimeOnly {
			setField(rv, runtimeFields[k.Name], k.Default)
		}
	}
	return r
}

// ValidateRuntime checks runtime-only settings against the table's bounds,
// for the runtime settings document to reuse. Problems name the key; their
// origin is given by the caller (for example the document version).
func ValidateRuntime(r Runtime, origin Origin) error {
	rv := reflect.ValueOf(&r).Elem()
	var errs []error
	for i := range keys {
		k := &keys[i]
		if k.Class != RuntimeOnly {
			continue
		}
		if err := k.validate(getField(rv, runtimeFields[k.Name])); err != nil {
			errs = append(errs, keyError(k.Name, origin, "%v", err))
		}
	}
	return errors.Join(errs...)
}
