from rlark_inventory.main import run

run()
