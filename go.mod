module github.com/parallax-engine/parallax

go 1.26

require (
	github.com/spf13/pflag v1.1.0
	github.com/vulkan-go/vulkan v0.0.0-20210402152248-956e3850d8f9
	github.com/x448/float16 v0.8.4
)
