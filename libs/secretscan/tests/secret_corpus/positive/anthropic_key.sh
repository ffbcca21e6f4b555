#! expect: anthropic_api_key@1
export ANTHROPIC_API_KEY="{{anthropic}}"
