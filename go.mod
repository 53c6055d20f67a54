module github.com/parallax-engine/parallax

go 1.26.0

require (
	github.com/ardanlabs/jinja v1.8.0
	github.com/dlclark/regexp2/v2 v2.13.0
	github.com/go-gl/glfw/v3.3/glfw v0.0.0-20260823155953-d41da22a9587
	github.com/spf13/pflag v1.1.0
	github.com/vulkan-go/vulkan v0.0.0-20210402152248-956e3850d8f9
	github.com/x448/float16 v0.8.4
	golang.org/x/image v0.40.0
	golang.org/x/term v0.48.0
	golang.org/x/text v0.44.0
)

require golang.org/x/sys v0.50.0 // indirect
