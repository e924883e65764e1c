"""Function tools and output formats for chat tiers: the options a request carries besides its messages, how a
chat template is given the tools, how a model's tool calls are parsed, and how tool_choice is enforced."""
