# Attention dumps per (model, task, model state): the input of every attention analysis.


rule dump_attention:
    conda:
        "../envs/torch.yaml"
    input:
        unpack(after_fitness_when_grouped("dump_attention")),
        unpack(lambda wc: EXPERIMENT.attention.encoder_inputs(wc.model, wc.task, wc.dumped)),
    output:
        attention=dump_file("results/attention/{model}/{task}/{dumped}.attention.parquet"),
        tokens=dump_file("results/attention/{model}/{task}/{dumped}.tokens.parquet"),
        summary="results/attention/{model}/{task}/{dumped}.json",
    params:
        # what the job computes in (bertology_core/models/precision.py)
        precision=config["compute"]["precision"],
        code=script_code("dump_attention"),
        max_examples=config["attention"]["max_examples"],
        seed=config["attention"]["seed"],
        batch_size=config["attention"]["batch_size"],
        bits=config["attention"]["bits"],
        # cut inputs as the dumped model was trained
        max_length=lambda wc: EXPERIMENT.max_length(wc.task, states.dumped_state(wc.dumped)),
    threads: config["attention"]["threads"]
    group: submission_group("dump_attention")
    resources:
        group_slot=1,  # one at a time in a cluster group submission (profiles/slurm)
        **requests("dump_attention"),
        cpus_per_task=config["attention"]["threads"],
        **model_device("dump_attention"),
    log:
        "logs/dump_attention/{model}/{task}/{dumped}.log",
    benchmark:
        "results/benchmarks/dump_attention/{model}/{task}/{dumped}.tsv"
    script:
        "../workflow_scripts/dump_attention.py"
