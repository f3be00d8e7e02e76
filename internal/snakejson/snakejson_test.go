package snakejson

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"Name": "name", "ArrivalRate": "arrival_rate", "APIKeyEnv": "api_key_env", "E2E": "e2e",
		"AllReduceHopUS": "all_reduce_hop_us", "KVHeads": "kv_heads", "TP": "tp", "ArrivalCV": "arrival_cv",
		"P99Tokens": "p99_tokens", "GPU": "gpu", "LoadGBps": "load_g_bps",
	} {
		assert.Equal(t, want, Snake(in), in)
	}
}

type inner struct {
	MaxNumSeqs int
	Skip       string `toml:"-"`
}

type Embedded struct {
	TimeScale float64
}

type outer struct {
	Embedded
	Name      string            `json:"name"`
	Rate      float64           `toml:"arrival_rate"`
	Opt       string            `json:"opt,omitempty"`
	OptToml   string            `toml:"opt_toml,omitempty"`
	Engine    *inner            `toml:"engine"`
	NoEngine  *inner            // nil: null
	Groups    []inner           // in order
	ByModel   map[string]inner  // keys kept
	Limit     time.Duration     // as encoding/json writes it
	When      time.Time         // a TextMarshaler: as encoding/json writes it
	Raw       json.RawMessage   // a Marshaler
	unexposed int               //nolint:unused // not written
	Tags      map[string]string `json:"tags,omitempty"`
}

func TestMarshalIndent(t *testing.T) {
	v := outer{
		Embedded: Embedded{TimeScale: 20}, Name: "e2e", Rate: 1.5, Engine: &inner{MaxNumSeqs: 256, Skip: "x"},
		Groups: []inner{{MaxNumSeqs: 1}, {MaxNumSeqs: 2}}, ByModel: map[string]inner{"B-Model": {3, ""}, "A": {4, ""}},
		Limit: 2 * time.Second, When: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Raw: json.RawMessage(`{"KeepMe":1}`),
	}
	got, err := MarshalIndent(v, "", "")
	require.NoError(t, err)
	want := `{"time_scale":20,"name":"e2e","arrival_rate":1.5,"engine":{"max_num_seqs":256},"no_engine":null,` +
		`"groups":[{"max_num_seqs":1},{"max_num_seqs":2}],"by_model":{"A":{"max_num_seqs":4},"B-Model":{"max_num_seqs":3}},` +
		`"limit":2000000000,"when":"2026-01-02T03:04:05Z","raw":{"KeepMe":1}}`
	var compact map[string]any
	require.NoError(t, json.Unmarshal(got, &compact), string(got))
	assert.JSONEq(t, want, string(got))
	// Declaration order, not sorted.
	assert.Regexp(t, `(?s)^\{\s*"time_scale".*"name".*"arrival_rate".*"engine"`, string(got))

	// encoding/json reads the keys back into the same struct where the names match without
	// the underscores' help; what run.json's readers need (name, mode, seed) does.
	var back struct {
		Name string
	}
	require.NoError(t, json.Unmarshal(got, &back))
	assert.Equal(t, "e2e", back.Name)
}
