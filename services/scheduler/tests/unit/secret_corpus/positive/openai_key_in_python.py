#! expect: openai_api_key@3
from openai import OpenAI

client = OpenAI(api_key="{{openai_legacy}}")
