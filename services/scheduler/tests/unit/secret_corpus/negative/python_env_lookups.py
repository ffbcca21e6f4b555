#! expect: none
import os
password = os.environ["DB_PASSWORD"]
token = os.getenv("HF_TOKEN")
client = make_client(api_key=args.api_key, secret=config.secret)
