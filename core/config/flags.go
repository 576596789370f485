package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// FlagConfig is the flag naming the config file.
const FlagConfig = "config"

// flagLayer is what the command line contributes.
type flagLayer struct {
	settings   []setting
	configPath string
	configSet  bool // --config given, even empty (which means "no file")
	help       bool
	errs       []error
}

// rawFlag is one occurrence of a key flag, in command-line order.
type rawFlag struct {
	key         *Key
	name, value string
}

// keyFlag records occurrences of one flag name; conversion happens after
// parsing so that every problem is reported with its flag name.
type keyFlag struct {
	key  *Key
	name string
	out  *[]rawFlag
}

func (f *keyFlag) String() string { return "" }
func (f *keyFlag) Set(s string) error {
	*f.out = append(*f.out, rawFlag{key: f.key, name: f.name, value: s})
	return nil
}

// IsBoolFlag lets "--tls.enabled" alone mean true, as the flag package
// does for booleans.
func (f *keyFlag) IsBoolFlag() bool { return f.key.Kind == KindBool || f.key.Kind == KindOptBool }

// pathFlag records --config.
type pathFlag struct {
	path *string
	set  *bool
}

func (f pathFlag) String() string     { return "" }
func (f pathFlag) Set(s string) error { *f.path, *f.set = s, true; return nil }

// newFlagSet registers --config and one flag per key name (plus the
// compatibility twins). Keys that flags may not set are registered too, so
// that using one earns an explanation rather than "not defined".
func newFlagSet(raw *[]rawFlag, l *flagLayer) *flag.FlagSet {
	fs := flag.NewFlagSet("fibril", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.Var(pathFlag{&l.configPath, &l.configSet}, FlagConfig, "TOML config file (env "+EnvConfig+")")
	for i := range keys {
		k := &keys[i]
		for _, name := range k.FlagNames() {
			fs.Var(&keyFlag{key: k, name: name, out: raw}, name, k.Doc)
		}
	}
	return fs
}

// parseFlags parses args with the standard flag package ("-name value",
// "--name=value", bare "--name" for booleans). The flag package stops at
// the first problem, so parsing resumes after each one to report them all.
func parseFlags(args []string) flagLayer {
	var l flagLayer
	var raw []rawFlag
	fs := newFlagSet(&raw, &l)

	rest := args
	for {
		err := fs.Parse(rest)
		consumed := len(rest) - len(fs.Args())
		prev := ""
		if consumed > 0 {
			prev = rest[consumed-1]
		}
		rest = fs.Args()
		switch {
		case err == nil && len(rest) == 0:
			l.settings = convertFlags(raw, &l.errs)
			return l
		case err == nil:
			l.errs = append(l.errs, unexpectedArg(fs, prev, rest[0]))
			rest = rest[1:]
		case errors.Is(err, flag.ErrHelp):
			l.help = true
			return l
		case consumed == 0:
			// "bad flag syntax" does not consume the argument; skip it
			// so parsing always moves forward.
			l.errs = append(l.errs, keyError("command line", Origin{Layer: LayerFlag, Name: strings.TrimLeft(rest[0], "-")}, "%v", err))
			rest = rest[1:]
		default:
			name, unknown := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
			if !unknown {
				l.errs = append(l.errs, keyError("command line", Origin{Layer: LayerFlag, Name: strings.TrimLeft(prev, "-")}, "%v", err))
				continue
			}
			o := Origin{Layer: LayerFlag, Name: name}
			hint := ""
			if n := nearest(name, flagNames()); n != "" {
				hint = " (did you mean --" + n + "?)"
			}
			l.errs = append(l.errs, keyError(name, o, "unknown flag%s", hint))
			// Without a definition we cannot know whether the flag
			// takes a value; assume "--name value" when no "=" was
			// used and the next argument is not a flag.
			if !strings.Contains(prev, "=") && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
				rest = rest[1:]
			}
		}
	}
}

// unexpectedArg explains a positional argument, which fibril never takes;
// after a boolean flag it is almost always "--flag false" meant as
// "--flag=false".
func unexpectedArg(fs *flag.FlagSet, prev, arg string) error {
	o := Origin{Layer: LayerFlag, Name: strings.TrimLeft(prev, "-")}
	if prevName := strings.TrimLeft(prev, "-"); prev != "" && !strings.Contains(prev, "=") {
		if f := fs.Lookup(prevName); f != nil {
			if b, ok := f.Value.(*keyFlag); ok && b.IsBoolFlag() {
				return keyError(b.key.Name, o, "unexpected argument %q: boolean flags take their value with '=', as in --%s=%s", arg, prevName, arg)
			}
		}
	}
	return keyError("command line", Origin{Layer: LayerFlag, Name: strings.TrimLeft(arg, "-")},
		"unexpected argument %q (fibril takes only flags; subcommands such as \"config check\" come first)", arg)
}

// convertFlags turns raw occurrences into settings. A repeated list flag
// adds entries; a repeated scalar flag keeps the last value. Each
// occurrence is checked, so an earlier bad value is still reported.
func convertFlags(raw []rawFlag, errs *[]error) []setting {
	var order []*Key
	byKey := map[*Key]*setting{}
	for _, r := range raw {
		k := r.key
		o := Origin{Layer: LayerFlag, Name: r.name}
		if !k.Allows(LayerFlag) {
			*errs = append(*errs, keyError(k.Name, o, "cannot be set by a flag: %s", k.refusal(LayerFlag)))
			continue
		}
		v, err := fromString(k, r.value)
		if err == nil && k.Kind != KindList {
			err = k.validate(v)
		}
		if err != nil {
			*errs = append(*errs, keyError(k.Name, o, "%v", err))
			continue
		}
		s := byKey[k]
		if s == nil {
			s = &setting{key: k}
			byKey[k] = s
			order = append(order, k)
		}
		if k.Kind == KindList {
			prev, _ := s.value.([]string)
			v = append(append([]string{}, prev...), v.([]string)...)
		}
		s.value, s.origin = v, o
	}
	out := make([]setting, 0, len(order))
	for _, k := range order {
		s := byKey[k]
		if k.Kind == KindList {
			if err := k.validate(s.value); err != nil {
				*errs = append(*errs, keyError(k.Name, s.origin, "%v", err))
				continue
			}
		}
		out = append(out, *s)
	}
	return out
}

// FlagUsage writes a short description of every flag, for --help.
func FlagUsage(w io.Writer) {
	fmt.Fprintf(w, "  --%s PATH\n\tTOML config file (env %s)\n", FlagConfig, EnvConfig)
	for i := range keys {
		k := &keys[i]
		if !k.Allows(LayerFlag) {
			continue
		}
		for _, name := range k.FlagNames() {
			arg := " " + strings.ToUpper(k.Kind.String())
			switch k.Kind {
			case KindBool, KindOptBool:
				arg = "[=BOOL]"
			case KindEnum:
				arg = " " + strings.Join(k.Enum, "|")
			case KindInt:
				arg = " N"
			case KindString:
				arg = " VALUE"
			case KindList:
				arg = " A,B,…"
			}
			def := formatValue(k, k.Default)
			if k.Default == nil {
				def = k.DefaultNote
			}
			fmt.Fprintf(w, "  --%s%s\n\t%s (default %s)\n", name, arg, k.Doc, def)
		}
	}
}
