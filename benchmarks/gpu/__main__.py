from benchmarks.gpu.cli import main

main()
