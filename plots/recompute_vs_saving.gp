# (c) What checkpointing costs against what it saves, each checkpointed configuration against
# the same configuration with ckpt none (docs/DESIGN.md: mem_saving = 1 - peak/peak(none),
# recompute_overhead = step_ms/step_ms(none) - 1). The claim "about 50% of activation memory
# for about 20% more time" is the star; the shaded box is where memopt claims calls it holding
# (saving in [40%, 60%], overhead at most 30%).
load scriptdir."/common.gp"
if (!exists("n_rec")) n_rec = 1
f = data("recompute_vs_saving.dat")
$claim << EOD
50 20
EOD
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("recompute_vs_saving", fmt)
    set title "Checkpointing: time overhead against memory saving (both vs. ckpt none)"
    if (n_rec == 0) {
        eval(empty_panel("no checkpointed rows with a timed ckpt-none baseline in this CSV (times need a GPU or the cpu backend)"))
    } else {
        set xlabel "memory saving vs. ckpt none (%)"
        set ylabel "time overhead vs. ckpt none (%)"
        set xrange [0:100]
        set yrange [-5:40<*]
        set object 1 rect from first 40, first -5 to first 60, first 30 fc rgb "#e8f5e9" fs solid 1.0 noborder behind
        set label 1 "claim holds here" at first 50, first 28 center textcolor rgb "#2e7d32" font ",9"
        set key below
        plot f using 2:4 with points pt 7 ps 1.5 lc rgb "#1f77b4" title "peak memory saving", \
             f using 3:4 with points pt 9 ps 1.5 lc rgb "#59a14f" title "activation memory saving", \
             f using 2:4:1 with labels left offset 1,0.6 font ",8" noenhanced notitle, \
             $claim using 1:2 with points pt 3 ps 3.5 lw 3 lc rgb "#d62728" title "claimed: 50% saving, 20% overhead"
        unset object 1
        unset label 1
    }
    set output
}
