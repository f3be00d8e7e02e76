// Package dataset locates the shared public data (traces, GPU profiles, answer sets) that
// calibration and validation read. The data is never copied into the repository.
package dataset

import (
	"os"
	"path/filepath"
)

// Env is the environment variable that points at the data folder.
const Env = "MOSAIC_DATA"

// Dir returns the data folder: $MOSAIC_DATA if set, else the first ../shared/data found from
// the working directory upwards. It returns "" when there is none.
func Dir() string {
	if d := os.Getenv(Env); d != "" {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
		return ""
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; {
		cand := filepath.Join(dir, "..", "shared", "data")
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return filepath.Clean(cand)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// File returns the path of a file inside the data folder and whether it exists.
func File(rel string) (string, bool) {
	d := Dir()
	if d == "" {
		return "", false
	}
	p := filepath.Join(d, rel)
	_, err := os.Stat(p)
	return p, err == nil
}
