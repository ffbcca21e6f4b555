from rlark_notifier.main import run

run()
