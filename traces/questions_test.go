package traces_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/traces"
)

const questionsHeader = "dataset,index,category,question_chars,question_words,gold\n"

// writeFile writes content to name in a fresh temporary folder and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestReadQuestions(t *testing.T) {
	p := writeFile(t, "q.csv", questionsHeader+
		"mmlu-pro,0,biology,995,153,G\n"+
		"mmlu-pro,1,computer science,226,32,C\n"+
		"medmcqa,0,,300,50,A\n"+
		"aime24,0,,380,54,33\n")
	qs, err := traces.ReadQuestions(p)
	require.NoError(t, err)
	require.Len(t, qs, 4)
	assert.Equal(t, traces.Question{Dataset: "mmlu-pro", Index: 0, Category: "biology", Chars: 995, Words: 153, Gold: "G"}, qs[0])
	assert.Equal(t, "computer science", qs[1].Category)
	assert.Equal(t, "33", qs[3].Gold)

	mmlu := traces.FilterDataset(qs, "mmlu-pro")
	require.Len(t, mmlu, 2)
	assert.Equal(t, 1, mmlu[1].Index)
	assert.Nil(t, traces.FilterDataset(qs, "gpqa"))
}

// Bad input names the file, the line and the column.
func TestReadQuestionsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"empty file", "", "q.csv: empty file"},
		{"wrong header", "dataset,idx,category,question_chars,question_words,gold\n", `q.csv:1:9: header column 2 is "idx", want "index"`},
		{"not an integer", questionsHeader + "mmlu-pro,0,law,12,3,A\nmmlu-pro,x,law,12,3,A\n", `q.csv:3:10: index: not an integer: "x"`},
		{"negative words", questionsHeader + "gpqa,0,,12,-3,A\n", "q.csv:2:12: question_words: must not be negative, got -3"},
		{"missing dataset", questionsHeader + ",0,,12,3,A\n", "q.csv:2:1: dataset: missing"},
		{"too few fields", questionsHeader + "gpqa,0,,12,3\n", "q.csv:2:1: wrong number of fields"},
		{"bad quoting", questionsHeader + "gpqa,0,\"a\"b,12,3,A\n", "q.csv:2:"},
		{"duplicate", questionsHeader + "gpqa,4,,12,3,A\ngpqa,4,,13,3,B\n", "q.csv:3:6: index: gpqa question 4 is listed twice (first on line 2)"},
		{"header only", questionsHeader, "q.csv: no questions after the header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "q.csv", tc.content)
			_, err := traces.ReadQuestions(p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), p[:len(p)-len("q.csv")]+tc.want)
		})
	}
	_, err := traces.ReadQuestions(filepath.Join(t.TempDir(), "none.csv"))
	assert.ErrorContains(t, err, "reading questions")
}

func TestReadSharedQuestions(t *testing.T) {
	qs, err := traces.ReadQuestions(sharedFile(t, "workloads/moa_questions.csv"))
	require.NoError(t, err)
	for _, tc := range []struct {
		dataset    string
		n, skills  int
		firstGold  string
		goldLetter bool
	}{
		{"mmlu-pro", 2100, 14, "G", true},
		{"medmcqa", 4183, 1, "", true},
		{"gpqa", 198, 1, "", true},
		{"aime24", 30, 1, "33", false},
	} {
		t.Run(tc.dataset, func(t *testing.T) {
			ds := traces.FilterDataset(qs, tc.dataset)
			require.Len(t, ds, tc.n)
			cats := map[string]bool{}
			for _, q := range ds {
				cats[q.Category] = true
				assert.Positive(t, q.Words)
			}
			assert.Len(t, cats, tc.skills)
			if tc.firstGold != "" {
				assert.Equal(t, tc.firstGold, ds[0].Gold)
			}
		})
	}
}
