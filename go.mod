module github.com/mosaic-sched/mosaic

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/stretchr/testify v1.12.1
	gonum.org/v1/gonum v0.17.0
)

require (
	github.com/draffensperger/golp v0.0.0-20250721104811-2d405f0b4e68 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/tools v0.30.0 // indirect
)
