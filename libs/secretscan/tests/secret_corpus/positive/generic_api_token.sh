#! expect: generic_token@1
export SERVICE_API_TOKEN={{alnum40}}
