package app

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/topology"
)

// ConfigVersion is the only config file version this build reads.
const ConfigVersion = topology.SnapshotVersion

// Config is the merged configuration of one command run. Precedence, lowest
// first: built-in defaults, config file, RANKGATE_* environment, flags. Keys
// are the long flag names ("nvml-timeout"); in the environment they are
// upper case with "_" ("RANKGATE_NVML_TIMEOUT").
type Config struct {
	v *viper.Viper

	LogLevel  string
	LogFormat string
	// File is the config file that was read, if any.
	File string
}

// maxConfigSize bounds the config file: it holds one value per flag, a
// few hundred bytes.
const maxConfigSize = 1 << 20

// defaults apply to keys no flag defines a default for.
var defaults = map[string]any{
	"log-level":  "warn",
	"log-format": "console",
}

// LoadConfig merges defaults, file, environment and cmd's flags, then
// validates. Unknown keys in the file and a wrong version are errors.
func LoadConfig(cmd *cobra.Command, file string) (*Config, error) {
	v := viper.New()
	for k, val := range defaults {
		v.SetDefault(k, val)
	}
	v.SetEnvPrefix("RANKGATE")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if file == "" {
		file = os.Getenv("RANKGATE_CONFIG")
	}
	if file != "" {
		data, err := fileinput.ReadFile(cmd.Context(), file, nil, maxConfigSize)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		values, err := decodeConfigFile(data, knownKeys(cmd.Root()))
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", file, err)
		}
		if err := v.MergeConfigMap(values); err != nil {
			return nil, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	var bindErr error
	bind := func(f *pflag.Flag) {
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = err
		}
	}
	cmd.Flags().VisitAll(bind)
	cmd.InheritedFlags().VisitAll(bind)
	if bindErr != nil {
		return nil, bindErr
	}
	c := &Config{v: v, File: file, LogLevel: v.GetString("log-level"), LogFormat: v.GetString("log-format")}
	if _, err := zapcore.ParseLevel(c.LogLevel); err != nil {
		return nil, fmt.Errorf("log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "console" && c.LogFormat != "json" {
		return nil, fmt.Errorf("log-format %q: want console or json", c.LogFormat)
	}
	// Durations are validated here so that commands can trust them.
	var errs []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Value.Type() != "duration" {
			return
		}
		s := v.GetString(f.Name)
		d, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s %q is not a duration like 30s", f.Name, s))
		} else if d < 0 {
			errs = append(errs, fmt.Sprintf("%s %q must not be negative", f.Name, s))
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return c, nil
}

// decodeConfigFile reads a versioned YAML config: a "version" key and flat
// keys named like the flags. Unknown keys are refused with the list of
// known ones.
func decodeConfigFile(data []byte, known map[string]bool) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	ver, _ := m["version"].(string)
	if ver != ConfigVersion {
		return nil, fmt.Errorf("version %q is not supported (want %q)", ver, ConfigVersion)
	}
	delete(m, "version")
	var unknown []string
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown keys %s (keys are the long flag names, e.g. nvml-timeout)", strings.Join(unknown, ", "))
	}
	return m, nil
}

func knownKeys(root *cobra.Command) map[string]bool {
	keys := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { keys[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { keys[f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	delete(keys, "config")
	delete(keys, "help")
	delete(keys, "version")
	return keys
}

// String returns a merged string value.
func (c *Config) String(key string) string { return c.v.GetString(key) }

// Bool returns a merged bool value.
func (c *Config) Bool(key string) bool { return c.v.GetBool(key) }

// Int returns a merged int value.
func (c *Config) Int(key string) int { return c.v.GetInt(key) }

// Duration returns a merged duration value (validated in LoadConfig).
func (c *Config) Duration(key string) time.Duration { return c.v.GetDuration(key) }

// Strings returns a merged list. A list from flags or the file is taken as
// is (a path may hold a comma); a single string from the environment or
// the file is split on commas.
func (c *Config) Strings(key string) []string {
	switch t := c.v.Get(key).(type) {
	case string:
		return splitList(t)
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			out = append(out, fmt.Sprint(e))
		}
		return out
	}
	return c.v.GetStringSlice(key)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// newLogger builds the one real logger; libraries get it or a no-op.
func newLogger(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if format == "json" {
		encoder = zapcore.NewJSONEncoder(enc)
	} else {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.AddSync(w), lvl)), nil
}

// configExample is printed by docs and tests: a valid file.
var configExample = bytes.TrimSpace([]byte(`
version: rankgate.io/v1
log-level: info
nvml-timeout: 10s
`))
