print("pushizo-worker")
